#include "app/plan.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "pipeline/gpu.h"

namespace pinfeed::app {
namespace {

// "auto" -> cuda if available else cpu; several ranks on CUDA: cuda:LOCAL_RANK. Throws ConfigError for a
// device that is not there.
c10::Device resolve_device(const Config& c, const DistEnv& dist) {
  const std::string& d = c.train.device;
  const std::string loc = location_of(c, "train.device");
  if (d == "cpu" || (d == "auto" && !gpu::available())) return c10::Device(c10::kCPU);
  if (dist.world > 1) {
    if (d != "auto" && d != "cuda") {
      throw ConfigError(loc + ": train.device = \"" + d + "\" with " + std::to_string(dist.world) +
                        " ranks: each rank takes cuda:LOCAL_RANK; set \"auto\" or \"cuda\" (or \"cpu\")");
    }
    if (!gpu::available()) throw ConfigError(loc + ": train.device = \"cuda\" but no CUDA device is available");
    if (dist.local_rank >= static_cast<int>(torch::cuda::device_count())) {
      throw ConfigError("LOCAL_RANK = " + std::to_string(dist.local_rank) + " but this host has only " +
                        std::to_string(torch::cuda::device_count()) + " CUDA device(s): start at most that many "
                        "processes per host (torchrun --nproc-per-node)");
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(dist.local_rank));
  }
  if (d == "auto") return c10::Device(c10::kCUDA, 0);
  if (!gpu::available()) {
    throw ConfigError(loc + ": train.device = \"" + d + "\" but no CUDA device is available" +
                      (gpu::compiled_with_cuda() ? "" : " (this build's LibTorch has no CUDA)"));
  }
  c10::Device device(d);
  if (!device.has_index()) device = c10::Device(c10::kCUDA, 0);
  if (device.index() >= static_cast<int>(torch::cuda::device_count())) {
    throw ConfigError(loc + ": train.device = \"" + d + "\" but only " + std::to_string(torch::cuda::device_count()) +
                      " CUDA device(s) exist");
  }
  return device;
}

struct Problem {
  std::string key, message;  // message empty: none
};

// What keeps the pipeline flags or the precision from running on the plan's device, and the key at fault.
Problem device_problem(const Plan& p) {
  const Config& c = p.config;
  if (auto problem = pipeline::check_options(p.pipeline, p.device.is_cuda()); !problem.empty()) {
    return {c.pipeline.mode.empty() ? problem.substr(0, problem.find(' ')) : "pipeline.mode", problem};
  }
  if (!p.device.is_cuda() && p.cuda_graph) {
    return {"train.cuda_graph", "train.cuda_graph = true needs a CUDA device (device is cpu)"};
  }
  if (!p.device.is_cuda() && p.precision == Precision::kBf16) {
    return {"train.precision", "train.precision = \"bf16\" needs a CUDA device (device is cpu)"};
  }
  return {};
}

data::LoaderOptions loader_options(const Config& c, bool train) {
  data::LoaderOptions o;
  o.batch_size = c.train.batch_size;
  o.workers = static_cast<int>(c.data.workers);
  o.prefetch_batches = static_cast<int>(c.data.prefetch_batches);
  o.shuffle = train;
  o.drop_last = train;
  o.prefetch_next_epoch = train;  // validation always re-reads epoch 0
  o.seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

}  // namespace

Plan resolve_plan(const Config& c, const DistEnv& dist) {
  Plan p;
  p.config = c;
  p.dist = dist;
  p.device = resolve_device(c, dist);
  p.precision = c.train.precision == "bf16" ? Precision::kBf16 : c.train.precision == "tf32" ? Precision::kTf32
                                                                                              : Precision::kFp32;
  p.channels_last = c.train.channels_last;
  p.cuda_graph = c.train.cuda_graph;
  p.cudnn_benchmark = c.train.cudnn_benchmark;
  p.pipeline = pipeline_options(c);
  if (const Problem problem = device_problem(p); !problem.message.empty()) {
    throw ConfigError(location_of(c, problem.key) + ": " + problem.message);
  }
  p.autocast_bf16 = p.device.is_cuda() && p.precision == Precision::kBf16;
  if (p.device.is_cuda()) {
    gpu::set_device(p.device.index());
    p.compute_stream = gpu::current_stream(p.device);
  }

  p.data_root = expand_user(c.data.root);
  p.transform.size = static_cast<int>(c.data.image_size);
  p.transform.val_resize_ratio = c.data.val_resize_ratio;
  p.transform.scale_min = c.data.scale_min;
  p.transform.scale_max = c.data.scale_max;
  p.transform.hflip = c.data.hflip;
  p.transform.crop_decode = c.data.crop_decode;
  p.transform.format = p.pipeline.transfer_dtype == pipeline::TransferDtype::kUint8 ? data::PixelFormat::kUint8Hwc
                                                                                     : data::PixelFormat::kFloat32Chw;
  p.on_bad_image = c.data.on_bad_image == "fail" ? data::BadImagePolicy::kFail : data::BadImagePolicy::kSkip;
  p.train_loader = loader_options(c, true);
  p.val_loader = loader_options(c, false);
  for (data::LoaderOptions* o : {&p.train_loader, &p.val_loader}) {
    if (o->workers == 0) o->workers = data::default_workers(dist.local_world);  // this host's cores, shared
    o->shard_rank = dist.rank;
    o->shards = dist.world;
  }

  p.feeder.device = p.device;
  p.feeder.compute_stream = p.compute_stream;
  p.feeder.channels_last = p.channels_last;
  p.max_steps_ahead = static_cast<int>(c.pipeline.max_steps_ahead);
  p.warmup_steps = c.pipeline.warmup_steps;

  p.sgd = {c.train.momentum, c.train.nesterov, c.train.weight_decay};
  p.decay_bn_and_bias = c.train.decay_bn_and_bias;
  p.schedule = c.train;
  if (c.train.lr_reference_batch > 0) {
    const double scale = static_cast<double>(c.train.batch_size) * dist.world / c.train.lr_reference_batch;
    p.schedule.lr *= scale;
    p.schedule.min_lr *= scale;
  }

  p.dist_backend = c.dist.backend == "auto" ? (p.device.is_cuda() ? "nccl" : "gloo") : c.dist.backend;
  if (dist.world > 1 && p.dist_backend == "nccl" && !p.device.is_cuda()) {
    throw ConfigError(location_of(c, "dist.backend") + ": dist.backend = \"nccl\" needs CUDA (device is cpu)");
  }
  if (dist.world > 1 && p.cuda_graph) {
    // The captured step would have to capture NCCL's all-reduce too, and captured collectives escape the
    // watchdog that bounds a dead rank's wait: refused rather than half-supported.
    throw ConfigError(location_of(c, "train.cuda_graph") + ": train.cuda_graph = true is not supported with " +
                      std::to_string(dist.world) + " ranks; use the eager step (train.cuda_graph = false)");
  }
  p.bucket_bytes = static_cast<int64_t>(c.dist.bucket_mb * (1 << 20));
  p.overlap = c.dist.overlap;
  p.dist_timeout = std::chrono::seconds(c.dist.timeout_s);
  return p;
}

Plan with_mode(const Plan& plan, const pipeline::ModePreset& preset) {
  Plan p = plan;
  pipeline::apply_preset(preset, p.pipeline);
  p.config.pipeline.mode = preset.name;
  if (const Problem problem = device_problem(p); !problem.message.empty()) {
    throw ConfigError(std::string("mode '") + preset.name + "': " + problem.message);
  }
  return p;
}

void configure_backend(const Plan& p) {
  if (!p.device.is_cuda()) return;
  auto& ctx = at::globalContext();
  ctx.setBenchmarkCuDNN(p.cudnn_benchmark);
  const bool tf32 = p.precision != Precision::kFp32;  // bf16 autocast leaves some fp32 matmuls; TF32 them too
  ctx.setAllowTF32CuBLAS(tf32);
  ctx.setAllowTF32CuDNN(tf32);
}

}  // namespace pinfeed::app

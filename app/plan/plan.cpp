#include "app/plan/plan.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "app/plan/memory.h"
#include "common/log.h"
#include "model/batch_norm.h"
#include "model/max_pool.h"
#include "gpu/gpu.h"
#include "pipeline/transfer/host_ring.h"
#include "pipeline/decode/jpeg_decoder.h"

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
  if (const auto problem = pipeline::check_options(p.pipeline, p.device.is_cuda())) {
    return {c.pipeline.mode.empty() ? problem.key : "pipeline.mode", problem.message};
  }
  if (!p.device.is_cuda() && p.cuda_graph) {
    return {"train.cuda_graph", "train.cuda_graph = true needs a CUDA device (device is cpu)"};
  }
  if (!p.device.is_cuda() && (p.precision == Precision::kBf16 || p.precision == Precision::kFp16)) {
    return {"train.precision", "train.precision = \"" + c.train.precision + "\" needs a CUDA device (device is cpu)"};
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
  o.sample_timeout_s = c.data.sample_timeout_s;
  return o;
}

constexpr int kMaxWorkersPerCore = 4;  // decode threads are CPU-bound: past a few per core they only contend
constexpr int kMaxWorkers = 1024;

std::string size_text(double bytes) {  // "1.5 GiB", "147 MiB"
  char s[32];
  if (bytes >= (1 << 30)) std::snprintf(s, sizeof s, "%.1f GiB", bytes / (1 << 30));
  else std::snprintf(s, sizeof s, "%.0f MiB", bytes / (1 << 20));
  return s;
}

// What one training step keeps (memory.h: the activations for backward, the model and its optimizer state)
// against what this process may use: on the CPU, every rank of this host with the host rings (`rings_bytes`) in
// the host memory still available, this process's cgroup included; on CUDA, the step and the input batch in the
// device's memory. An estimate with a margin, so that a run that cannot fit is refused here, before anything is
// allocated, rather than killed by the OOM killer in its first step. Throws ConfigError naming the keys.
void check_step_memory(const Plan& p, const HostMemory& host, double rings_bytes) {
  const Config& c = p.config;
  const int64_t batch = p.train_loader.batch_size, size = p.transform.size;
  const int element_bytes = p.autocast ? 2 : 4;
  const double activations = activation_bytes(batch, size, element_bytes), state = model_state_bytes(c.model.num_classes);
  const std::string what = "activations " + size_text(activations) + " for train.batch_size " + std::to_string(batch) +
                           " x data.image_size " + std::to_string(size) + " px in " + (p.autocast ? "16" : "32") +
                           "-bit, model and optimizer state " + size_text(state);
  const std::string lower = ": lower train.batch_size or data.image_size";
  if (p.device.is_cuda()) {
    // float32 is what the model sees whatever pipeline.transfer_dtype carries.
    const double input = static_cast<double>(batch) * 3 * size * size * 4;
    const double need = activations + state + input;
    const auto info = gpu::device_info(p.device.index());
    if (info.total_memory > 0 && need > static_cast<double>(info.total_memory)) {
      throw ConfigError(location_of(c, "train.batch_size") + ": a training step needs ~" + size_text(need) + " (" + what +
                        ", one input batch " + size_text(input) + "), more than the " +
                        size_text(static_cast<double>(info.total_memory)) + " of " + p.device.str() + " (" + info.name +
                        ")" + lower + (p.autocast ? "" : ", or set train.precision = \"bf16\""));
    }
    return;
  }
  const int ranks = std::max(1, p.dist.local_world);
  const double need = ranks * (activations + state) + rings_bytes;
  if (host.available > 0 && need > host.available) {
    const std::string limit = host.cgroup_limit > 0 ? ": cgroup limit " + size_text(host.cgroup_limit) : ": no cgroup limit";
    throw ConfigError(location_of(c, "train.batch_size") + ": a training step needs ~" + size_text(need) + " (" +
                      (ranks > 1 ? std::to_string(ranks) + " ranks on this host, each: " : "") + what +
                      "; host batch rings " + size_text(rings_bytes) + "), this process may use " +
                      size_text(host.available) + " (" + size_text(host.total) + " in all" + limit + ")" + lower +
                      " (the rings: data.prefetch_batches" + (c.train.eval ? ", or train.eval = false)" : ")"));
  }
}

// Sizes the config multiplies into, against this machine, before anything is allocated: decode threads, the host
// batch rings (pinned or pageable: a pinned ring over its budget falls back to pageable, so the pageable size is
// the one that must fit) and a training step's memory. Throws ConfigError naming the keys and the sizes.
void check_resources(const Plan& p) {
  const Config& c = p.config;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int max_workers = std::min(kMaxWorkers, kMaxWorkersPerCore * cores);
  if (p.train_loader.workers > max_workers) {
    throw ConfigError(location_of(c, "data.workers") + ": data.workers = " + std::to_string(p.train_loader.workers) +
                      " decode threads is more than " + std::to_string(kMaxWorkersPerCore) + " per core (" +
                      std::to_string(cores) + " cores here): set at most " + std::to_string(max_workers) +
                      ", or 0 for the default (" + std::to_string(data::default_workers(p.dist.local_world)) + ")");
  }

  // Every rank on this host holds a training ring and, with train.eval, a validation ring, at the same time.
  const int slots = p.feeder.ring_slots > 0 ? p.feeder.ring_slots : p.train_loader.prefetch_batches + 2;
  const size_t image_bytes = data::bytes_per_image(p.transform.format, p.transform.size);
  const double ring = static_cast<double>(pipeline::ring_bytes(slots, p.train_loader.batch_size, image_bytes));
  const int rings = (c.train.eval ? 2 : 1) * std::max(1, p.dist.local_world);
  // Half the memory: the rest is for the decode workers' scratch, the dataset index, the model and its
  // optimizer state on the CPU, LibTorch and the OS.
  const HostMemory host = read_host_memory();
  const double memory = host.total, allowed = memory / 2;
  if (memory > 0 && ring * rings > allowed) {
    throw ConfigError(location_of(c, c.locations.count("data.prefetch_batches") ? "data.prefetch_batches" : "train.batch_size") +
                      ": the host batch rings need " + size_text(ring * rings) + " (" + std::to_string(rings) + " ring(s) of " +
                      std::to_string(slots) + " slots = data.prefetch_batches " + std::to_string(p.train_loader.prefetch_batches) +
                      " + 2, of train.batch_size " + std::to_string(p.train_loader.batch_size) + " x data.image_size " +
                      std::to_string(p.transform.size) + " px = " + size_text(ring / slots) + " per batch), over half of this "
                      "machine's " + size_text(memory) + " of memory: lower data.prefetch_batches, train.batch_size or data.image_size");
  }
  check_step_memory(p, host, ring * rings);
}

// What pinfeed's own CUDA ops (model.fused_bn, model.max_pool) lack to run under this plan, "" if nothing: they
// read and write channels_last tensors on CUDA (with a contiguous model they would add copies), and the build
// may lack them (`unavailable`: the op's own reason, "" when built in).
std::string own_op_missing(const Plan& p, const std::string& unavailable) {
  if (!p.device.is_cuda()) return "a CUDA device (device is " + p.device.str() + ")";
  if (!p.channels_last) return "train.channels_last = true";
  return unavailable;
}

// model.fused_bn: cuDNN's fused BatchNorm also needs autocast (bf16/fp16 tensors); "auto" takes it wherever it
// can run, "on" insists (a ConfigError saying what is missing).
bool resolve_fused_bn(const Plan& p) {
  const Config& c = p.config;
  if (c.model.fused_bn == "off") return false;
  const std::string why = model::fused_batch_norm_unavailable_reason();
  const std::string missing =
      own_op_missing(p, !p.autocast     ? "train.precision = \"bf16\" or \"fp16\" (is \"" + c.train.precision + "\")"
                        : !why.empty() ? "cuDNN: " + why
                                       : "");
  if (missing.empty()) return true;
  if (c.model.fused_bn == "on") {
    throw ConfigError(location_of(c, "model.fused_bn") + ": model.fused_bn = \"on\" needs " + missing +
                      "; set \"auto\" to fall back to ATen's BatchNorm");
  }
  return false;
}

// model.max_pool: "auto" takes pinfeed's kernels wherever they can run, "pinfeed" insists.
bool resolve_stem_max_pool(const Plan& p) {
  const Config& c = p.config;
  if (c.model.max_pool == "aten") return false;
  const std::string missing = own_op_missing(p, model::stem_max_pool_unavailable_reason());
  if (missing.empty()) return true;
  if (c.model.max_pool == "auto") return false;
  throw ConfigError(location_of(c, "model.max_pool") + ": model.max_pool = \"pinfeed\" needs " + missing +
                    "; set \"auto\" to fall back to ATen's");
}

// model.bn_graph: the graph API's route is part of the fused BatchNorm and needs the cuDNN frontend in the build.
// "auto" takes what was measured fastest, wherever it can run: in fp16 the convolution with BN statistics ("conv";
// cuDNN has plans for it in fp16 only), otherwise the graphs at 14x14 and smaller ("small"). The others insist.
model::GraphBatchNorm resolve_bn_graph(const Plan& p) {
  const Config& c = p.config;
  const std::string& v = c.model.bn_graph;
  if (v == "off") return model::GraphBatchNorm::kNone;
  const std::string why = model::graph_batch_norm_unavailable_reason();
  const std::string missing = !p.fused_bn ? "the fused BatchNorm (model.fused_bn: " + c.model.fused_bn +
                                                " did not resolve to it under this plan)"
                              : !why.empty() ? why
                                             : "";
  const bool fp16 = p.precision == Precision::kFp16;
  if (v == "conv" && missing.empty() && !fp16) {
    throw ConfigError(location_of(c, "model.bn_graph") + ": model.bn_graph = \"conv\" needs train.precision = " +
                      "\"fp16\" (is \"" + c.train.precision + "\"; cuDNN has plans for it in fp16 only); set \"auto\" or \"off\"");
  }
  if (missing.empty()) {
    return v == "all"                        ? model::GraphBatchNorm::kAll
           : v == "conv" || (v == "auto" && fp16) ? model::GraphBatchNorm::kConv
                                                   : model::GraphBatchNorm::kSmall;
  }
  if (v == "auto") return model::GraphBatchNorm::kNone;
  throw ConfigError(location_of(c, "model.bn_graph") + ": model.bn_graph = \"" + v + "\" needs " + missing +
                    "; set \"auto\" or \"off\"");
}

// model.fold_grad_add: the GEMM reads channels_last memory as rows. "auto" takes it with the fused BN, where it
// was measured (the step it belongs to); on the CPU it works but was not measured.
bool resolve_fold_grad_add(const Plan& p) {
  const Config& c = p.config;
  if (c.model.fold_grad_add == "off") return false;
  if (c.model.fold_grad_add == "auto") return p.fused_bn;
  if (!p.channels_last) {
    throw ConfigError(location_of(c, "model.fold_grad_add") +
                      ": model.fold_grad_add = \"on\" needs train.channels_last = true; set \"auto\" or \"off\"");
  }
  return true;
}

// model.pad_input: the feeder writes the model's input as fp16 RGB and a zero fourth channel. It does so where
// it normalises uint8 pixels on the GPU (transfer_dtype uint8 or the GPU decoder), and only fp16 gains from it
// (cuDNN's bf16 stem is as slow with 4 channels as with 3).
bool resolve_pad_input(const Plan& p) {
  const Config& c = p.config;
  if (c.model.pad_input == "off") return false;
  const std::string missing =
      own_op_missing(p, p.precision != Precision::kFp16 ? "train.precision = \"fp16\" (is \"" + c.train.precision + "\")"
                        : p.pipeline.transfer_dtype != pipeline::TransferDtype::kUint8
                            ? "pipeline.transfer_dtype = \"uint8\" or data.decoder = \"nvjpeg\""
                            : "");
  if (missing.empty()) return true;
  if (c.model.pad_input == "auto") return false;
  throw ConfigError(location_of(c, "model.pad_input") + ": model.pad_input = \"on\" needs " + missing +
                    "; set \"auto\" to fall back to float32 RGB");
}

}  // namespace

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "fp32";
}

Plan resolve_plan(const Config& c, const DistEnv& dist) {
  Plan p;
  p.config = c;
  p.dist = dist;
  p.device = resolve_device(c, dist);
  p.precision = c.train.precision == "bf16"   ? Precision::kBf16
                : c.train.precision == "fp16" ? Precision::kFp16
                : c.train.precision == "tf32" ? Precision::kTf32
                                              : Precision::kFp32;
  p.channels_last = c.train.channels_last;
  p.cuda_graph = c.train.cuda_graph;
  p.cudnn_benchmark = c.train.cudnn_benchmark;
  p.pipeline = pipeline_options(c);
  if (const Problem problem = device_problem(p); !problem.message.empty()) {
    throw ConfigError(location_of(c, problem.key) + ": " + problem.message);
  }
  if (p.precision == Precision::kBf16) p.autocast = at::kBFloat16;
  if (p.precision == Precision::kFp16) {
    p.autocast = at::kHalf;
    p.loss_scaling = LossScalerOptions{};
    p.loss_scaling->init_scale = c.train.loss_scale_init;
    p.loss_scaling->growth_interval = c.train.loss_scale_growth_interval;
  }
  p.fused_bn = resolve_fused_bn(p);
  p.stem_max_pool = resolve_stem_max_pool(p);
  p.fold_grad_add = resolve_fold_grad_add(p);
  p.bn_graph = resolve_bn_graph(p);
  p.zero_init_residual = c.model.zero_init_residual;
  p.num_classes = c.model.num_classes;
  // The device's current stream, named by its index: the same whether or not the device is the current one yet
  // (use_plan_device, after resolving).
  if (p.device.is_cuda()) p.compute_stream = gpu::current_stream(p.device);

  // data.decoder: nvjpeg leaves JPEGs to the GPU, which writes uint8 pixels normalised there, so the pixels
  // cross as uint8 whatever pipeline.transfer_dtype says.
  // auto: nvjpeg where it can run (CUDA, built in), else the CPU.
  const bool ask_gpu = c.data.decoder == "nvjpeg" || (c.data.decoder == "auto" && p.device.is_cuda());
  const std::string nvjpeg_problem = ask_gpu && p.device.is_cuda() ? gpu::JpegDecoder::unavailable_reason() : "";
  p.transform.gpu_decode = c.data.decoder == "nvjpeg" || (ask_gpu && nvjpeg_problem.empty());
  p.transform.gpu_share = c.data.gpu_decode_share;
  if (p.transform.gpu_decode) {
    if (!p.device.is_cuda()) {
      throw ConfigError(location_of(c, "data.decoder") + ": data.decoder = \"nvjpeg\" needs a CUDA device (device is " +
                        p.device.str() + ")");
    }
    if (!nvjpeg_problem.empty()) throw ConfigError(location_of(c, "data.decoder") + ": nvJPEG unavailable: " + nvjpeg_problem);
    if (p.pipeline.transfer_dtype != pipeline::TransferDtype::kUint8 && c.locations.count("pipeline.transfer_dtype")) {
      log::warn(location_of(c, "pipeline.transfer_dtype") + ": pipeline.transfer_dtype = \"" + c.pipeline.transfer_dtype +
                "\" does not apply with data.decoder = \"nvjpeg\": the GPU decodes to uint8 and normalises there");
    }
    p.pipeline.transfer_dtype = pipeline::TransferDtype::kUint8;
  }

  p.data_root = expand_user(c.data.root);
  p.train_split = c.data.train_split;
  p.val_split = c.data.val_split;
  p.transform.size = static_cast<int>(c.data.image_size);
  p.transform.val_resize_ratio = c.data.val_resize_ratio;
  p.transform.scale_min = c.data.scale_min;
  p.transform.scale_max = c.data.scale_max;
  p.transform.hflip = c.data.hflip;
  p.transform.crop_decode = c.data.crop_decode;
  p.transform.max_image_pixels = c.data.max_image_pixels;
  p.transform.max_file_bytes = c.data.max_file_mb << 20;
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
  if (resolve_pad_input(p)) {
    p.feeder.input_dtype = at::kHalf;
    p.feeder.input_channels = 4;
  }
  p.max_steps_ahead = static_cast<int>(c.pipeline.max_steps_ahead);
  p.warmup_steps = c.pipeline.warmup_steps;

  p.train.max_steps_per_epoch = c.train.max_steps_per_epoch;
  p.train.eval = c.train.eval;
  p.train.init_from = expand_user(c.train.init_from);
  p.train.label_smoothing = c.train.label_smoothing;
  p.run.dir = c.run.dir;
  p.run.name = c.run.name;
  p.run.checkpoint_every = c.run.checkpoint_every;
  p.run.log_steps = c.run.log_steps;
  p.run.progress_interval_s = c.run.progress_interval_s;
  p.run.trace_steps = parse_step_range(c.run.trace_steps);  // checked with the key; the epochs it may span, by train
  check_resources(p);

  p.sgd = {c.train.momentum, c.train.nesterov, c.train.weight_decay};
  p.decay_bn_and_bias = c.train.decay_bn_and_bias;
  p.schedule = {c.train.lr, c.train.min_lr, c.train.warmup_epochs, c.train.epochs};
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
  p.bucket_mb = c.dist.bucket_mb;
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
  const bool tf32 = p.precision != Precision::kFp32;  // autocast leaves some fp32 matmuls; TF32 them too
  ctx.setAllowTF32CuBLAS(tf32);
  ctx.setAllowTF32CuDNN(tf32);
}

}  // namespace pinfeed::app

#include "app/plan/plan.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "app/plan/cpu_fallback.h"
#include "app/plan/memory.h"
#include "common/log.h"
#include "data/limits.h"
#include "model/batch_norm.h"
#include "model/max_pool.h"
#include "gpu/gpu.h"
#include "pipeline/transfer/host_ring.h"
#include "pipeline/decode/jpeg_decoder.h"

namespace pinfeed::app {
namespace {

// "auto" -> cuda if available else cpu; several ranks on CUDA: cuda:LOCAL_RANK. Throws ConfigError for a
// device that is not there.
c10::Device resolve_device(const Config& c, const engine::DistEnv& dist) {
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

// What keeps the pipeline flags from running on the plan's device, and the key at fault.
Problem device_problem(const Plan& p) {
  if (const auto problem = pipeline::check_options(p.pipeline, p.device.is_cuda())) {
    return {p.pipeline.mode ? "pipeline.mode" : problem.key, problem.message};
  }
  return {};
}

std::string size_text(double bytes) {  // "1.5 GiB", "147 MiB"
  char s[32];
  if (bytes >= (1 << 30)) std::snprintf(s, sizeof s, "%.1f GiB", bytes / (1 << 30));
  else std::snprintf(s, sizeof s, "%.0f MiB", bytes / (1 << 20));
  return s;
}

// The key that set a training side: data.image_size, or the schedule's key that gives it.
std::string train_side_key(const data::TransformOptions& t, int side) {
  const data::SideSchedule& s = t.schedule;
  if (!s.by_epoch.empty()) return "data.image_size_by_epoch";
  if (s.ramp()) return side == s.min ? "data.image_size_min" : "data.image_size_max";
  return "data.image_size";
}

// Where an error about a product of keys is located: at one the user set, an override before the config file (the
// value just typed is likelier what broke the fit than the recipe that ran before), else in `keys`' order.
std::string location_of_first_set(const Config& c, const std::vector<std::string>& keys) {
  for (const bool override : {true, false}) {
    for (const std::string& key : keys) {
      if (c.locations.count(key) && set_by_override(c, key) == override) return location_of(c, key);
    }
  }
  return location_of(c, keys.front());
}

// What one training step keeps (memory.h: the activations for backward, the model and its optimizer state)
// against what this process may use: on the CPU, every rank of this host with the host rings (`rings_bytes`) in
// the host memory still available, this process's cgroup included; on CUDA, the step and the input batch in the
// device's memory. An estimate with a margin, so that a run that cannot fit is refused here, before anything is
// allocated, rather than killed by the OOM killer in its first step. Throws ConfigError naming the keys.
void check_step_memory(const Plan& p, const HostMemory& host, double rings_bytes) {
  const Config& c = p;
  const int64_t batch = p.train_loader.batch_size;
  const bool half = engine::autocast_dtype(p.step.precision).has_value();
  const int element_bytes = half ? 2 : 4;
  // A schedule: the largest side's step; under CUDA graphs, every side's, since each graph keeps its own memory.
  const std::vector<int> sides = p.transform.schedule.sides(p.schedule.epochs, p.transform.size);
  const int64_t size = sides.back();
  const bool graphs = p.device.is_cuda() && p.step.cuda_graph && sides.size() > 1;
  const model::ArchSpec& arch = model::spec_of(p.step.net.arch);
  double activations = 0;
  for (int side : sides) {
    if (graphs || side == size) activations += activation_bytes(arch, batch, side, element_bytes, p.step.net.blurpool);
  }
  const double state = model_state_bytes(arch, c.model.num_classes,
                                         p.step.optimizer.kind == engine::OptimizerKind::kLamb ? 3 : 1,
                                         p.step.ema.enabled);
  std::string sizes_text = std::to_string(size) + " px";
  if (graphs) {
    sizes_text = "each training side (";
    for (size_t i = 0; i < sides.size(); ++i) sizes_text += (i ? ", " : "") + std::to_string(sides[i]);
    sizes_text += " px: one CUDA graph each)";
  }
  const std::string side_key = train_side_key(p.transform, static_cast<int>(size));
  const std::string at = location_of_first_set(c, {side_key, "train.batch_size"});
  const std::string what = "activations " + size_text(activations) + " for train.batch_size " + std::to_string(batch) +
                           " x " + side_key + " " + sizes_text + " in " + (half ? "16" : "32") +
                           "-bit, model and optimizer state " + size_text(state);
  const std::string lower = ": lower train.batch_size or " + side_key;
  if (p.device.is_cuda()) {
    // float32 is what the model sees whatever pipeline.transfer_dtype carries.
    const double input = static_cast<double>(batch) * 3 * size * size * 4;
    const double need = activations + state + input;
    const auto info = gpu::device_info(p.device.index());
    if (info.total_memory > 0 && need > static_cast<double>(info.total_memory)) {
      throw ConfigError(at + ": a training step needs ~" + size_text(need) + " (" + what + ", one input batch " +
                        size_text(input) + "), more than the " + size_text(static_cast<double>(info.total_memory)) +
                        " of " + p.device.str() + " (" + info.name + ")" + lower +
                        (half ? "" : ", or set train.precision = \"bf16\""));
    }
    return;
  }
  const int ranks = std::max(1, p.dist_env.local_world);
  const double need = ranks * (activations + state) + rings_bytes;
  if (host.available > 0 && need > host.available) {
    const std::string limit = host.cgroup_limit > 0 ? ": cgroup limit " + size_text(host.cgroup_limit) : ": no cgroup limit";
    throw ConfigError(at + ": a training step needs ~" + size_text(need) + " (" +
                      (ranks > 1 ? std::to_string(ranks) + " ranks on this host, each: " : "") + what +
                      "; host batch rings " + size_text(rings_bytes) + "), this process may use " +
                      size_text(host.available) + " (" + size_text(host.total) + " in all" + limit + ")" + lower +
                      " (the rings: data.prefetch_batches" + (c.train.eval ? ", or train.eval = false)" : ")"));
  }
}

// Sizes the config multiplies into, against this machine, before anything is allocated: decode threads, the host
// batch rings (pinned or pageable: a pinned ring over its budget falls back to pageable, so the pageable size is
// the one that must fit) and a training step's memory. Throws ConfigError naming the keys and the sizes.
void check_resources(const Plan& p, PlanUse use) {
  const Config& c = p;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int max_workers = data::max_workers(cores);
  if (p.train_loader.workers > max_workers) {
    throw ConfigError(location_of(c, "data.workers") + ": data.workers = " + std::to_string(p.train_loader.workers) +
                      " decode threads is more than " + std::to_string(data::kMaxWorkersPerCore) + " per core (" +
                      std::to_string(cores) + " cores here): set at most " + std::to_string(max_workers) +
                      ", or 0 for the default (" + std::to_string(data::default_workers(p.train_loader.host_ranks)) + ")");
  }

  // Every rank on this host holds a training ring and, with train.eval, a validation ring, at the same time.
  const int slots = pipeline::ring_slots(p.train_loader.prefetch_batches);
  // Both rings counted at the larger of training's largest side and validation's: a bound from above.
  const int train_side = data::largest_side(p.transform, /*train=*/true), val_side = data::side_of(p.transform, false, 0);
  const int side = std::max(train_side, val_side);
  const std::string side_key = val_side <= train_side ? train_side_key(p.transform, train_side)
                               : p.transform.val_size > 0 ? "data.val_image_size" : "data.image_size";
  const size_t image_bytes = data::bytes_per_image(p.transform.format, side);
  const double ring = static_cast<double>(pipeline::ring_bytes(slots, p.train_loader.batch_size, image_bytes));
  const int rings = (c.train.eval ? 2 : 1) * std::max(1, p.dist_env.local_world);
  const HostMemory host = read_host_memory();
  const double memory = host.total;
  if (!pipeline::host_rings_fit(ring * rings, memory)) {
    throw ConfigError(location_of_first_set(c, {"data.prefetch_batches", side_key, "train.batch_size"}) +
                      ": the host batch rings need " + size_text(ring * rings) + " (" + std::to_string(rings) + " ring(s) of " +
                      std::to_string(slots) + " slots = data.prefetch_batches " + std::to_string(p.train_loader.prefetch_batches) +
                      " + 2, of train.batch_size " + std::to_string(p.train_loader.batch_size) + " x " + side_key + " " +
                      std::to_string(side) + " px = " + size_text(ring / slots) + " per batch), over half of this "
                      "machine's " + size_text(memory) + " of memory: lower data.prefetch_batches, train.batch_size or " + side_key);
  }
  if (use == PlanUse::kTrain) check_step_memory(p, host, ring * rings);
}

// What pinfeed's own CUDA ops (model.fused_bn, model.max_pool) lack to run under this plan, "" if nothing: they
// read and write channels_last tensors on CUDA (with a contiguous model they would add copies), and the build
// may lack them (`unavailable`: the op's own reason, "" when built in).
std::string own_op_missing(const Plan& p, const std::string& unavailable) {
  if (!p.device.is_cuda()) return "a CUDA device (device is " + p.device.str() + ")";
  if (!p.step.channels_last) return "train.channels_last = true";
  return unavailable;
}

// "auto" (nullopt) takes one of pinfeed's own ops wherever it can run; "on" insists: `missing` is what it lacks
// under this plan ("" if nothing), `key` and `fallback` say what to set instead.
bool settle(const Plan& p, const std::optional<bool>& asked, const std::string& key, const std::string& missing,
            const std::string& fallback) {
  if (asked == false) return false;
  if (missing.empty()) return true;
  if (!asked) return false;
  throw ConfigError(location_of(p, key) + ": " + key + " = \"on\" needs " + missing + "; set \"auto\" " + fallback);
}

std::string precision_text(const Plan& p) { return std::string("\"") + name_of(p.step.precision) + "\""; }

// model.fused_bn: cuDNN's fused BatchNorm also needs autocast (bf16/fp16 tensors).
bool resolve_fused_bn(const Plan& p) {
  const std::string why = model::fused_batch_norm_unavailable_reason();
  const std::string missing = own_op_missing(
      p, !engine::autocast_dtype(p.step.precision) ? "train.precision = \"bf16\" or \"fp16\" (is " + precision_text(p) + ")"
         : !why.empty()                    ? "cuDNN: " + why
                                           : "");
  return settle(p, p.model.fused_bn, "model.fused_bn", missing, "to fall back to ATen's BatchNorm");
}

// model.max_pool: pinfeed's kernels ("pinfeed" insists) or ATen's.
bool resolve_stem_max_pool(const Plan& p) {
  if (p.model.stem_max_pool == false) return false;
  const std::string missing = own_op_missing(p, model::stem_max_pool_unavailable_reason());
  if (missing.empty()) return true;
  if (!p.model.stem_max_pool) return false;
  throw ConfigError(location_of(p, "model.max_pool") + ": model.max_pool = \"pinfeed\" needs " + missing +
                    "; set \"auto\" to fall back to ATen's");
}

// model.bn_graph: the graph API's route is part of the fused BatchNorm and needs the cuDNN frontend in the build.
// "auto" takes what was measured fastest, wherever it can run: in fp16 the convolution with BN statistics ("conv";
// cuDNN has plans for it in fp16 only), otherwise the graphs at 14x14 and smaller ("small"). The others insist.
model::GraphBatchNorm resolve_bn_graph(const Plan& p, bool fused_bn) {
  using model::GraphBatchNorm;
  const std::optional<GraphBatchNorm>& asked = p.model.bn_graph;
  if (asked == GraphBatchNorm::kNone) return GraphBatchNorm::kNone;
  const std::string why = model::graph_batch_norm_unavailable_reason();
  const std::string missing = !fused_bn ? "the fused BatchNorm (model.fused_bn did not resolve to it under this plan)"
                              : !why.empty() ? why
                                             : "";
  const bool fp16 = p.step.precision == engine::Precision::kFp16;
  const std::string at = location_of(p, "model.bn_graph") + ": model.bn_graph = \"";
  if (asked == GraphBatchNorm::kConv && missing.empty() && !fp16) {
    throw ConfigError(at + "conv\" needs train.precision = \"fp16\" (is " + precision_text(p) +
                      "; cuDNN has plans for it in fp16 only); set \"auto\" or \"off\"");
  }
  if (missing.empty()) return asked ? *asked : fp16 ? GraphBatchNorm::kConv : GraphBatchNorm::kSmall;
  if (!asked) return GraphBatchNorm::kNone;
  throw ConfigError(at + model::to_string(*asked) + "\" needs " + missing + "; set \"auto\" or \"off\"");
}

// model.fold_grad_add: the GEMM reads channels_last memory as rows. "auto" takes it with the fused BN, where it
// was measured (the step it belongs to); on the CPU it works but was not measured.
bool resolve_fold_grad_add(const Plan& p, bool fused_bn) {
  if (!p.model.fold_grad_add) return fused_bn;
  return settle(p, p.model.fold_grad_add, "model.fold_grad_add",
                p.step.channels_last ? "" : "train.channels_last = true", "or \"off\"");
}

// model.pad_input: the feeder writes the model's input as fp16 RGB and a zero fourth channel. It does so where
// it normalises uint8 pixels on the GPU (transfer_dtype uint8 or the GPU decoder), and only fp16 gains from it
// (cuDNN's bf16 stem is as slow with 4 channels as with 3).
bool resolve_pad_input(const Plan& p, bool uint8_pixels) {
  const std::string missing = own_op_missing(
      p, p.step.precision != engine::Precision::kFp16 ? "train.precision = \"fp16\" (is " + precision_text(p) + ")"
         : !uint8_pixels ? "pipeline.transfer_dtype = \"uint8\" or data.decoder = \"nvjpeg\""
                         : "");
  return settle(p, p.model.pad_input, "model.pad_input", missing, "to fall back to float32 RGB");
}

// The step's "auto" switches: what was measured faster wherever it can run. channels_last and a CUDA graph on
// CUDA, with any number of ranks (the gradient all-reduce is captured in the graph; a dead peer is still named
// by the heartbeats, which never wait on a collective). An explicit true that cannot run is device_problem's error.
void resolve_step_switches(Plan& p) {
  const bool cuda = p.device.is_cuda();
  p.step.channels_last = p.train.channels_last.value_or(cuda);
  p.step.cuda_graph = p.train.cuda_graph.value_or(cuda);
}

// pipeline.mode or one of its three flags written: the user chose how batches cross; else the feed's rule does.
bool transfer_mode_chosen(const Plan& p) {
  if (p.pipeline.mode) return true;
  for (const char* flag : {"pipeline.pin_memory", "pipeline.non_blocking", "pipeline.dual_stream"}) {
    if (p.locations.count(flag)) return true;
  }
  return false;
}

}  // namespace

bool may_decode_on_gpu(const Config& c) {
  return c.dataset.decoder != pipeline::Decoder::kCpu && c.train.device != "cpu";
}

Plan resolve_plan(const Config& c, const engine::DistEnv& dist, PlanUse use) {
  Plan p;
  static_cast<Config&>(p) = c;
  p.dist_env = dist;
  p.device = resolve_device(c, dist);
  fall_back_to_pageable(p);
  fall_back_on_the_cpu(p, use);
  resolve_step_switches(p);
  if (const Problem problem = device_problem(p); !problem.message.empty()) {
    throw ConfigError(location_of(c, problem.key) + ": " + problem.message);
  }
  // The device's current stream, named by its index: the same whether or not the device is the current one yet
  // (use_plan_device, after resolving).
  if (p.device.is_cuda()) p.compute_stream = gpu::current_stream(p.device);

  // data.decoder, the pixels' crossing and the auto transfer mode: the feed's rules (pipeline/resolve_feed.h).
  pipeline::FeedAnswer feed;
  try {
    feed = pipeline::resolve_feed({p.dataset.decoder, p.device,
                                   p.pipeline.transfer_dtype == pipeline::TransferDtype::kUint8, c.augment.pixel_ops(),
                                   /*normalised=*/true, transfer_mode_chosen(p)});
  } catch (const std::invalid_argument& e) {
    throw ConfigError(location_of(c, "data.decoder") + ": " + e.what());
  }
  p.transform.gpu_decode = feed.gpu_decode;
  p.transform.format = feed.format;
  p.pipeline.transfer_dtype = feed.transfer_dtype;
  const bool uint8_pixels = feed.transfer_dtype == pipeline::TransferDtype::kUint8;
  if (feed.uint8_because != pipeline::Uint8Because::kAsked && uint8_pixels && c.locations.count("pipeline.transfer_dtype")) {
    const std::string why = feed.uint8_because == pipeline::Uint8Because::kGpuDecoder
        ? "data.decoder = \"nvjpeg\": the GPU decodes to uint8 and normalises there"
        : "data.auto_augment = \"" + pipeline::augment::policy_text(c.augment.auto_augment) +
              "\": its ops work on the uint8 pixels, on the device";
    log::warn(location_of(c, "pipeline.transfer_dtype") + ": pipeline.transfer_dtype = \"float32\" does not apply with " + why);
  }
  if (feed.preset) {  // the flags only: pipeline.mode stays as written
    const auto& preset = pipeline::preset_of(*feed.preset);
    p.pipeline.pin_memory = preset.pin_memory;
    p.pipeline.non_blocking = preset.non_blocking;
    p.pipeline.dual_stream = preset.dual_stream;
  }

  model::ResNetOptions& net = p.step.net;
  net.fused_bn = resolve_fused_bn(p);
  net.stem_max_pool = resolve_stem_max_pool(p);
  net.fold_grad_add = resolve_fold_grad_add(p, net.fused_bn);
  net.bn_graph = resolve_bn_graph(p, net.fused_bn);
  p.step.device = p.device;
  p.step.compute_stream = p.compute_stream;
  p.step.seed = p.train_loader.seed;  // train.seed: the loaders' shuffles and the model's initial weights
  p.step.batch_size = p.train_loader.batch_size;

  data::LoaderOptions& train = p.train_loader;
  train.host_ranks = dist.local_world;  // data.workers = 0: this host's cores, shared
  train.shard_rank = dist.rank;
  train.shards = dist.world;
  p.val_loader = train;
  p.val_loader.shuffle = p.val_loader.drop_last = false;
  p.val_loader.continue_into_next_epoch = false;  // validation always re-reads epoch 0

  p.feeder.device = p.device;
  p.feeder.compute_stream = p.compute_stream;
  p.feeder.channels_last = p.step.channels_last;
  if (resolve_pad_input(p, uint8_pixels)) {
    p.feeder.input_dtype = at::kHalf;
    p.feeder.input_channels = 4;
  }
  check_resources(p, use);

  if (c.schedule.reference_batch > 0) {
    p.schedule.batch_scale =
        static_cast<double>(train.batch_size) * dist.world * p.step.accumulate_steps / c.schedule.reference_batch;
  }

  p.backend = c.dist.backend != Backend::kAuto ? c.dist.backend : p.device.is_cuda() ? Backend::kNccl : Backend::kGloo;
  if (dist.world > 1 && p.backend == Backend::kNccl && !p.device.is_cuda()) {
    throw ConfigError(location_of(c, "dist.backend") + ": dist.backend = \"nccl\" needs CUDA (device is cpu)");
  }
  return p;
}

Plan with_mode(const Plan& plan, const pipeline::ModePreset& preset) {
  Plan p = plan;
  pipeline::apply_preset(preset, p.pipeline);
  if (const Problem problem = device_problem(p); !problem.message.empty()) {
    throw ConfigError(std::string("mode '") + preset.name + "': " + problem.message);
  }
  return p;
}

pipeline::augment::AugmentOptions train_augment(const Plan& p, int64_t num_classes) {
  pipeline::augment::AugmentOptions a = p.augment;
  a.num_classes = num_classes;
  a.label_smoothing = p.step.label_smoothing;
  return a;
}

void configure_backend(const Plan& p) {
  if (!p.device.is_cuda()) return;
  auto& ctx = at::globalContext();
  ctx.setBenchmarkCuDNN(p.train.cudnn_benchmark);
  const bool tf32 = p.step.precision != engine::Precision::kFp32;  // autocast leaves some fp32 matmuls; TF32 them too
  ctx.setAllowTF32CuBLAS(tf32);
  ctx.setAllowTF32CuDNN(tf32);
}

}  // namespace pinfeed::app

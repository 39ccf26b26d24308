#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <optional>
#include <string>

#include "app/config/config.h"
#include "engine/dist/distributed.h"
#include "data/dataset/dataset.h"
#include "data/loader/loader.h"
#include "model/batch_norm.h"
#include "pipeline/transfer/feeder.h"
#include "pipeline/transfer/options.h"

namespace pinfeed::app {

// A Config with its answers for this process: the device and its stream, every "auto" settled, the loaders'
// and the feeder's shape, checked together against this machine. The Config part holds the keys as they were
// written (to_toml(plan) writes them back; location_of(plan, key) names where): resolve_plan writes only fields
// no key writes, but for pipeline.transfer_dtype under the GPU decoder or data.auto_augment (uint8) and the three
// transfer flags under pipeline.mode = "auto" on CUDA (dual_stream's), and on the CPU the keys whose values need
// CUDA: the transfer flags (pageable's), train.precision (fp32), train.cuda_graph (false), model.fused_bn,
// model.bn_graph, model.max_pool and model.pad_input (ATen's ops, float32 RGB input) and data.decoder (cpu).
// Resolving changes no process state: start.h sets what a plan asks of the process.
struct Plan : Config {
  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> compute_stream;  // CUDA: the stream the model runs on; nullopt on the CPU
  Backend backend = Backend::kGloo;           // dist.backend settled: nccl or gloo
  data::LoaderOptions val_loader;             // train_loader's, in order and once through
  pipeline::FeederOptions feeder;             // device, compute stream, layout, the model's input type
  engine::DistEnv dist_env;  // this process's place (world 1 without a launcher)
};

// What the plan is for. Evaluating (pinfeed eval) runs the model forward only: what only a training step needs
// is neither refused nor checked there (on the CPU train.precision's autocast becomes fp32, one line says so, and
// the training step's CUDA kernels and graph their eager equivalents without a word; a training step's memory is
// not estimated).
enum class PlanUse { kTrain, kEval };

// Resolves and checks; throws ConfigError naming the key (file:line:col) at fault. `dist` is where this
// process sits (dist_env_from_environment()); the default is a single process. On the CPU what needs CUDA falls
// back with one warning each, so that a GPU recipe still runs there: the transfer flags (a preset's or written
// ones) to mode pageable, as a pinned ring over its budget does (there is no transfer to overlap); half precision
// to fp32, a CUDA graph to the eager step, pinfeed's CUDA kernels to ATen's, nvJPEG to the CPU decoder.
Plan resolve_plan(const Config& config, const engine::DistEnv& dist = {}, PlanUse use = PlanUse::kTrain);
// The same plan in another transfer mode, checked again for its device.
Plan with_mode(const Plan& plan, const pipeline::ModePreset& preset);
// Whether the GPU may decode JPEGs under this config, before the device is resolved: what resolve_plan's answer
// (transform.gpu_decode) starts from, and what start() sets CUDA's environment by.
bool may_decode_on_gpu(const Config& config);
// The training Feeder's augmentations: the config's, with the soft targets' width (the model's classes) and
// train.label_smoothing, which Mixup/CutMix fold into them.
pipeline::augment::AugmentOptions train_augment(const Plan& plan, int64_t num_classes);
// cuDNN autotuning and TF32 for the plan's device and precision (process-wide LibTorch settings).
void configure_backend(const Plan& plan);

}  // namespace pinfeed::app

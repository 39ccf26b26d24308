// A config resolved once into everything a run needs: the device and its compute stream, the precision, each
// stage's options and the ring's shape, checked together in one place. `train` and `bench` take a Plan. What
// resolving changes (the device, the learning rate, the decoder) is read from the plan alone; what it
// leaves as written (epochs, batch size, the run folder, file:line:col for messages) from the Config it came from.
// Resolving changes no process state: start.h sets what a plan asks of the process.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <optional>
#include <string>

#include "app/config/config.h"
#include "app/dist/distributed.h"
#include "app/optim/loss_scaler.h"
#include "app/optim/lr_schedule.h"
#include "app/optim/sgd.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "pipeline/feeder.h"
#include "pipeline/options.h"

namespace pinfeed::app {

enum class Precision { kFp32, kTf32, kBf16, kFp16 };

struct Plan {
  Config config;  // what the plan was resolved from

  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> compute_stream;  // CUDA: the stream the model runs on; nullopt on the CPU
  Precision precision = Precision::kFp32;
  std::optional<c10::ScalarType> autocast;  // bf16 or fp16 autocast of the forward pass (CUDA only); nullopt: none
  std::optional<LossScalerOptions> loss_scaling;  // fp16: dynamic loss scaling; nullopt: none
  bool fused_bn = false;  // model.fused_bn resolved: cuDNN's fused BatchNorm in training
  bool stem_max_pool = false;  // model.max_pool resolved: pinfeed's max pool kernels in training
  bool fold_grad_add = false;  // model.fold_grad_add resolved: block-input gradients summed inside a GEMM
  bool channels_last = false;
  bool cuda_graph = false;
  bool cudnn_benchmark = true;

  std::string data_root;  // "~/" expanded
  data::TransformOptions transform;  // its pixel format follows pipeline.transfer_dtype
  data::BadImagePolicy on_bad_image = data::BadImagePolicy::kSkip;
  data::LoaderOptions train_loader, val_loader;
  pipeline::PipelineOptions pipeline;  // the preset applied
  pipeline::FeederOptions feeder;      // device, compute stream, layout
  int max_steps_ahead = 2;
  int64_t warmup_steps = 10;  // per epoch, left out of the figures
  std::optional<StepRange> trace_steps;  // run.trace_steps: global steps to record a trace of (train)

  SgdOptions sgd;
  bool decay_bn_and_bias = true;
  // The learning rate the run uses, and the only one: config.train.lr and min_lr stay as written (config.toml,
  // checkpoints) and are not read after resolving, since train.lr_reference_batch scales them to the global batch.
  LrSchedule schedule;

  // Data parallelism: this process's place (world 1 without a launcher) and how gradients are averaged.
  DistEnv dist;
  std::string dist_backend;  // "nccl" | "gloo"
  int64_t bucket_bytes = 25 << 20;
  bool overlap = true;
  std::chrono::seconds dist_timeout{300};
};

// Resolves and checks; throws ConfigError naming the key (file:line:col) at fault. `dist` is where this
// process sits (dist_env_from_environment()); the default is a single process.
Plan resolve_plan(const Config& config, const DistEnv& dist = {});
// The same plan in another transfer mode, checked again for its device.
Plan with_mode(const Plan& plan, const pipeline::ModePreset& preset);
// cuDNN autotuning and TF32 for the plan's device and precision (process-wide LibTorch settings).
void configure_backend(const Plan& plan);

}  // namespace pinfeed::app

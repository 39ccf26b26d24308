// A config resolved once into everything a run needs: the device and its compute stream, the precision, each
// stage's options and the ring's shape, the run's length and its outputs, checked together in one place. `train`,
// `bench` and `eval` take a Plan and read every value from it: after resolve_plan, the Config it came from
// (`config`) is read only to name a key in a message (location_of: file:line:col) and to be written out as text
// (config.toml, the ranks' agreement, a checkpoint's config); app/plan/plan.cpp alone turns config into options.
// A value has one place the run reads it from: the learning rate and the number of epochs are `schedule`'s,
// train.batch_size (per rank) and train.seed the loaders' (train_loader.batch_size, train_loader.seed).
// Resolving changes no process state: start.h sets what a plan asks of the process.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <optional>
#include <string>

#include "app/config/config.h"
#include "app/dist/distributed.h"
#include "app/optim/loss_scaler.h"
#include "app/optim/lr_schedule.h"
#include "app/optim/sgd.h"
#include "data/dataset/dataset.h"
#include "data/loader/loader.h"
#include "model/batch_norm.h"
#include "pipeline/transfer/feeder.h"
#include "pipeline/transfer/options.h"

namespace pinfeed::app {

enum class Precision { kFp32, kTf32, kBf16, kFp16 };
const char* precision_name(Precision precision);  // as train.precision spells it: "fp32", "tf32", "bf16", "fp16"

// The run's folder and what it writes there (run.*).
struct RunPlan {
  std::string dir = "runs";         // run.dir: where a new run's folder is made and `--resume last` looks
  std::string name = "run";         // run.name: a new run's folder is named after it; run.json records it
  int64_t checkpoint_every = 1;     // run.checkpoint_every: last.pt every this many epochs (and after the last)
  bool log_steps = false;           // run.log_steps: rank 0 writes each step's row to steps.jsonl
  double progress_interval_s = 10;  // run.progress_interval_s: the progress line's period when not on a terminal
  std::optional<StepRange> trace_steps;  // run.trace_steps: global steps to record a trace of (train)
};

// The training run's own terms (train.*) beyond the loaders', the optimizer's and the schedule's.
struct TrainPlan {
  int64_t max_steps_per_epoch = 0;  // train.max_steps_per_epoch: 0 = every batch of the epoch
  bool eval = true;                 // train.eval: evaluate on the val split after each epoch
  std::string init_from;            // train.init_from, "~/" expanded: a new run's starting weights; "" = none
  double label_smoothing = 0;       // train.label_smoothing: of the training loss
};

struct Plan {
  Config config;  // what the plan was resolved from: for messages (location_of) and to write out as text alone

  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> compute_stream;  // CUDA: the stream the model runs on; nullopt on the CPU
  Precision precision = Precision::kFp32;
  std::optional<c10::ScalarType> autocast;  // bf16 or fp16 autocast of the forward pass (CUDA only); nullopt: none
  std::optional<LossScalerOptions> loss_scaling;  // fp16: dynamic loss scaling; nullopt: none
  bool fused_bn = false;  // model.fused_bn resolved: cuDNN's fused BatchNorm in training
  bool stem_max_pool = false;  // model.max_pool resolved: pinfeed's max pool kernels in training
  bool fold_grad_add = false;  // model.fold_grad_add resolved: block-input gradients summed inside a GEMM
  model::GraphBatchNorm bn_graph = model::GraphBatchNorm::kNone;  // model.bn_graph resolved
  bool zero_init_residual = true;  // model.zero_init_residual: each block starts as the identity
  int64_t num_classes = 0;  // model.num_classes: the classifier's outputs; 0 = the training split's class folders
  bool channels_last = false;
  bool cuda_graph = false;
  bool cudnn_benchmark = true;

  std::string data_root;  // "~/" expanded
  std::string train_split, val_split;  // data.train_split, data.val_split: the split folders under data_root
  data::TransformOptions transform;  // its pixel format follows pipeline.transfer_dtype
  data::BadImagePolicy on_bad_image = data::BadImagePolicy::kSkip;
  data::LoaderOptions train_loader, val_loader;
  pipeline::PipelineOptions pipeline;  // the preset applied
  pipeline::FeederOptions feeder;      // device, compute stream, layout
  int max_steps_ahead = 2;
  int64_t warmup_steps = 10;  // per epoch, left out of the figures

  TrainPlan train;  // steps per epoch, evaluation, starting weights, label smoothing (train.*)
  RunPlan run;      // the run folder and what it writes (run.*)

  SgdOptions sgd;
  bool decay_bn_and_bias = true;
  // The learning rate the run uses, and the only one: config.train.lr and min_lr stay as written (config.toml,
  // checkpoints) and are not read after resolving, since train.lr_reference_batch scales them to the global batch.
  // Its epochs are the run's (train.epochs).
  LrSchedule schedule;

  // Data parallelism: this process's place (world 1 without a launcher) and how gradients are averaged.
  DistEnv dist;
  std::string dist_backend;  // "nccl" | "gloo"
  double bucket_mb = 25;  // dist.bucket_mb: gradients all-reduced per bucket of this many MiB
  int64_t bucket_bytes() const { return static_cast<int64_t>(bucket_mb * (1 << 20)); }
  bool overlap = true;  // dist.overlap: all-reduce each bucket during backward
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

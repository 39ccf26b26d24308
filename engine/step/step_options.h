// What a StepRunner builds and runs: the model, its optimizer and the step. The config's keys write into it
// (app/config/keys.cpp); resolve_plan settles the device, the stream and the model's "auto" choices.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <optional>

#include "engine/optim/loss_scaler.h"
#include "engine/optim/ema.h"
#include "engine/optim/optimizer.h"
#include "model/resnet.h"

namespace pinfeed::engine {

enum class Precision { kFp32, kTf32, kBf16, kFp16 };

// bf16 or fp16 autocast of the forward pass (CUDA only); nullopt: none. fp16 also scales the loss.
std::optional<c10::ScalarType> autocast_dtype(Precision precision);

struct StepOptions {
  c10::Device device{c10::kCPU};              // resolve_plan
  std::optional<c10::Stream> compute_stream;  // resolve_plan: CUDA, the stream the model runs on
  Precision precision = Precision::kTf32;     // fp32 | tf32 | bf16 | fp16
  LossScalerOptions loss_scaler;              // fp16 only: dynamic loss scaling
  bool channels_last = false;                 // resolve_plan: the model's 4-D parameters in channels_last
  bool cuda_graph = false;                    // resolve_plan: capture the training step once and replay it (CUDA only)
  model::ResNetOptions net;  // num_classes from the dataset; its kernels' choices settled by resolve_plan
  uint64_t seed = 0;           // the model's initial weights (train.seed, as the loaders')
  int64_t batch_size = 0;      // resolve_plan: train.batch_size, the batches cuda_graph captures (0: any)
  double label_smoothing = 0;  // of the training loss
  bool eval_flip = false;      // eval_step's logits: the mean of the image's and its horizontal flip's
  OptimizerOptions optimizer;     // train.optimizer and its terms
  bool decay_bn_and_bias = true;  // false: no weight decay on BN parameters and biases
  EmaOptions ema;                 // train.ema: an EMA of the weights, updated after each step, evaluated beside them
  // train.accumulate_steps: the optimizer steps once every this many micro-batches (train_step calls), on the
  // mean of their gradients; several ranks all-reduce once per optimizer step.
  int64_t accumulate_steps = 1;
  // Several ranks: gradients all-reduced per bucket of this many MiB, during backward with overlap.
  double bucket_mb = 25;
  bool overlap = true;
  int64_t bucket_bytes() const { return static_cast<int64_t>(bucket_mb * (1 << 20)); }
};

}  // namespace pinfeed::engine

// Mean training loss of the epoch, kept on the device; read without stalling the GPU: a snapshot is copied
// asynchronously on the compute stream and shown one progress tick later.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "gpu/gpu.h"

namespace pinfeed::app {

// The rule that an epoch's mean training loss says the run diverged even though the weights are finite: more
// than kDivergedLossFactor x ln(classes), the loss of a uniform guess (label smoothing keeps it near that), or
// not finite outside fp16 (where the loss scaler skips an overflowed step and the run goes on).
inline constexpr double kDivergedLossFactor = 1000;
bool loss_diverged(double mean_loss, int64_t num_classes, bool fp16);

class LossMeter {
 public:
  // stream: the compute stream on CUDA, nullopt on the CPU.
  LossMeter(c10::Device device, std::optional<c10::Stream> stream);
  void reset();
  void add(const at::Tensor& loss);  // a step's mean loss, on the device
  // A resumed epoch: the sum and number of the steps before the resume (the sum as sum() held it, a float).
  void restore(double sum, int64_t count);
  double latest();                   // the newest snapshot that has arrived; NaN before the first
  double mean() const;               // synchronises
  at::Tensor sum() const { return sum_; }  // () float on the device
  int64_t count() const { return count_; }

 private:
  c10::Device device_;
  std::optional<c10::Stream> stream_;
  at::Tensor sum_, snapshot_;  // () float on the device; () on the host
  int64_t count_ = 0, snapshot_count_ = 0;
  double shown_ = 0;
  std::shared_ptr<gpu::Event> ready_;
};

}  // namespace pinfeed::app

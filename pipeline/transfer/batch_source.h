// Where a step's batch comes from. Training reads a Feeder; the bench's framing rows read a batch already
// on the device (the compute ceiling) or the CPU pipeline alone (the feed ceiling). The step loop sees only
// this, so what the bench times is by construction what training does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "pipeline/timing/step_meter.h"

namespace pinfeed::pipeline {

struct DeviceBatch {
  at::Tensor images;  // (B, 3, S, S) float32 on the device, normalised (channels_last if asked)
  // (B,) int64 on the device; with Mixup/CutMix (augment/mixup.h), (B, classes) float32 soft targets
  at::Tensor labels;
  int64_t epoch = 0;
  int64_t index = -1;
  int64_t size = 0;
  int bad_images = 0;
  FeedTiming timing;  // host time in next() and the copy's span on its stream
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Starts (or restarts) an epoch at batch `first_batch`; abandons batches in flight.
  virtual void start_epoch(int64_t epoch, int64_t first_batch = 0) = 0;
  // The next batch, ready for the compute stream; nullopt once the epoch is done.
  virtual std::optional<DeviceBatch> next() = 0;
  virtual int64_t batches_per_epoch() const = 0;
};

}  // namespace pinfeed::pipeline

// Feeder: the loader, its host ring and the host-to-device step, in whichever transfer mode was asked for.
// The trainer only calls next(); the mode decides how the batch got there.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <memory>
#include <optional>
#include <string>

#include "data/loader.h"
#include "pipeline/gpu.h"
#include "pipeline/host_ring.h"
#include "pipeline/options.h"
#include "pipeline/step_meter.h"

namespace pinfeed::pipeline {

struct DeviceBatch {
  at::Tensor images;  // (B, 3, S, S) float32 on the device, normalised (channels_last if asked)
  at::Tensor labels;  // (B,) int64 on the device
  int64_t index = -1;
  int64_t size = 0;
  int bad_images = 0;
  FeedTiming timing;  // host time in next() and the copy's span on its stream
};

struct FeederOptions {
  c10::Device device = c10::Device(c10::kCPU);
  bool channels_last = false;
  int ring_slots = 0;  // 0: prefetch_batches + 2 (one being copied, one being computed on)
};

class Feeder {
 public:
  Feeder(std::shared_ptr<const data::Dataset> dataset, data::LoaderOptions loader_options,
         PipelineOptions options, FeederOptions feeder_options);
  ~Feeder();

  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  std::optional<DeviceBatch> next();

  const PipelineOptions& options() const { return options_; }  // what really runs (after any fallback)
  std::string mode() const { return mode_name(options_); }
  int64_t pinned_bytes() const { return ring_->pinned() ? ring_->bytes() : 0; }
  int64_t host_ring_bytes() const { return ring_->bytes(); }
  int64_t batches_per_epoch() const { return loader_->batches_per_epoch(); }
  int workers() const { return loader_->workers(); }
  const data::Loader& loader() const { return *loader_; }
  const HostRing& ring() const { return *ring_; }

 private:
  void make_ring(const data::Dataset& dataset, int64_t batch_size, int slots);
  std::optional<DeviceBatch> transfer(const c10::Stream* stream);  // loader.next() + copy (+ normalise)
  std::optional<DeviceBatch> next_dual_stream();
  at::Tensor to_model_layout(at::Tensor images) const;

  PipelineOptions options_;
  FeederOptions feeder_options_;
  bool cuda_ = false;
  std::unique_ptr<HostRing> ring_;
  std::unique_ptr<data::Loader> loader_;
  std::optional<data::Batch> held_;  // CPU: batch in use by the model, recycled at the next call
  std::optional<c10::Stream> copy_stream_;
  std::optional<DeviceBatch> ahead_;  // dual_stream: next batch, issued on the copy stream
  std::shared_ptr<gpu::Event> ahead_ready_;
  gpu::EventPool events_;
  double loader_ms_ = 0;      // this call's time blocked in loader_->next()
  at::Tensor scale_, shift_;  // (1, 3, 1, 1) on the device: uint8 pixel * scale + shift = normalised value
};

}  // namespace pinfeed::pipeline

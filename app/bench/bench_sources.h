// The bench's two framing rows as batch sources for the shared step loop: a batch already on the device (the
// compute ceiling: gpu_resident) and the CPU pipeline alone, handing each slot straight back (the feed
// ceiling: loader_only).
#pragma once

#include <memory>

#include "data/dataset/dataset.h"
#include "data/loader/loader.h"
#include "pipeline/transfer/batch_source.h"
#include "pipeline/transfer/host_ring.h"

namespace pinfeed::app {

// The same device batch every step, never ending; no wait, no copy.
class ResidentBatch : public pipeline::BatchSource {
 public:
  explicit ResidentBatch(pipeline::DeviceBatch batch);  // keeps its own copy of the tensors
  void start_epoch(int64_t, int64_t) override {}
  std::optional<pipeline::DeviceBatch> next() override { return batch_; }
  int64_t batches_per_epoch() const override { return 1; }

 private:
  pipeline::DeviceBatch batch_;
};

// Workers decode into a pageable ring; next() hands each slot straight back and returns the batch's size and
// wait (images and labels undefined: nothing steps on them).
class LoaderOnly : public pipeline::BatchSource {
 public:
  LoaderOnly(std::shared_ptr<const data::Dataset> dataset, const data::LoaderOptions& options);
  ~LoaderOnly() override;
  void start_epoch(int64_t epoch, int64_t first_batch) override;
  std::optional<pipeline::DeviceBatch> next() override;
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
  int workers() const { return loader_->workers(); }

 private:
  std::unique_ptr<pipeline::HostRing> ring_;
  std::unique_ptr<data::Loader> loader_;
};

}  // namespace pinfeed::app

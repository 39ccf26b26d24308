// A fixed ring of host batch buffers (page-locked or pageable) that the loader's workers fill in place.
// A slot is handed out again only after the copy that read it has completed (its fence).
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "data/batch_arena.h"

namespace pinfeed::pipeline {

class HostRing : public data::BatchArena {
 public:
  // Each slot: images (batch_size, sample_shape...) of `dtype`, labels (batch_size,) int64.
  // pinned: allocated with gpu::pinned_empty (throws if that fails).
  HostRing(int slots, int64_t batch_size, const std::vector<int64_t>& sample_shape, c10::ScalarType dtype,
           bool pinned);

  bool pinned() const { return pinned_; }
  int64_t bytes() const { return bytes_; }  // all slots, images + labels
  at::Tensor images(int slot) const { return images_[slot]; }  // (B, ...) host
  at::Tensor labels(int slot) const { return labels_[slot]; }  // (B,) int64 host

  // data::BatchArena
  int slots() const override { return static_cast<int>(images_.size()); }
  data::BatchMemory memory(int slot) override;
  std::optional<int> try_acquire() override;
  std::optional<int> acquire() override;
  void release(int slot, std::shared_ptr<data::Fence> fence) override;

 private:
  std::vector<at::Tensor> images_, labels_;
  bool pinned_;
  int64_t bytes_ = 0;
  std::mutex mutex_;
  std::deque<int> free_;                                              // reusable now
  std::deque<std::pair<int, std::shared_ptr<data::Fence>>> fenced_;  // released, oldest first
};

// Bytes a ring of `slots` would pin, for checking the budget before allocating.
int64_t ring_bytes(int slots, int64_t batch_size, size_t image_bytes);

}  // namespace pinfeed::pipeline

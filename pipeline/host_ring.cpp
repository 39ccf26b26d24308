#include "pipeline/host_ring.h"

#include <ATen/ops/empty.h>

#include "pipeline/gpu.h"

namespace pinfeed::pipeline {

int64_t ring_bytes(int slots, int64_t batch_size, size_t image_bytes) {
  return static_cast<int64_t>(slots) * batch_size * (static_cast<int64_t>(image_bytes) + 8);
}

HostRing::HostRing(int slots, int64_t batch_size, const std::vector<int64_t>& sample_shape, c10::ScalarType dtype,
                   bool pinned)
    : pinned_(pinned) {
  std::vector<int64_t> shape{batch_size};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  for (int i = 0; i < slots; ++i) {
    if (pinned) {
      images_.push_back(gpu::pinned_empty(shape, dtype));
      labels_.push_back(gpu::pinned_empty({batch_size}, c10::kLong));
    } else {
      images_.push_back(at::empty(shape, at::TensorOptions().dtype(dtype)));
      labels_.push_back(at::empty({batch_size}, at::TensorOptions().dtype(c10::kLong)));
    }
    bytes_ += images_.back().nbytes() + labels_.back().nbytes();
    free_.push_back(i);
  }
}

data::BatchMemory HostRing::memory(int slot) {
  return {images_[slot].data_ptr(), labels_[slot].data_ptr<int64_t>()};
}

std::optional<int> HostRing::try_acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!free_.empty()) {
    const int slot = free_.front();
    free_.pop_front();
    return slot;
  }
  for (auto it = fenced_.begin(); it != fenced_.end(); ++it) {
    if (it->second->ready()) {
      const int slot = it->first;
      fenced_.erase(it);
      return slot;
    }
  }
  return std::nullopt;
}

std::optional<int> HostRing::acquire() {
  if (auto slot = try_acquire()) return slot;
  std::pair<int, std::shared_ptr<data::Fence>> oldest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fenced_.empty()) return std::nullopt;
    oldest = std::move(fenced_.front());
    fenced_.pop_front();
  }
  oldest.second->wait();
  return oldest.first;
}

void HostRing::release(int slot, std::shared_ptr<data::Fence> fence) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fence) {
    fenced_.emplace_back(slot, std::move(fence));
  } else {
    free_.push_back(slot);
  }
}

}  // namespace pinfeed::pipeline

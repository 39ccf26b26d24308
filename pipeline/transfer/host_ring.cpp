#include "pipeline/transfer/host_ring.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "gpu/gpu.h"

namespace pinfeed::pipeline {

namespace {
int64_t align8(int64_t n) { return (n + 7) / 8 * 8; }
}  // namespace

int64_t ring_bytes(int slots, int64_t batch_size, size_t image_bytes) {
  return slots * (align8(batch_size * static_cast<int64_t>(image_bytes)) + batch_size * 8);
}

SampleFormat sample_format(data::PixelFormat format, int side) {
  if (format == data::PixelFormat::kUint8Hwc) return {{side, side, 3}, c10::kByte};
  return {{3, side, side}, c10::kFloat};
}

SlotLayout::SlotLayout(int64_t batch_size, const std::vector<int64_t>& sample_shape, c10::ScalarType dtype)
    : dtype(dtype), batch_size(batch_size) {
  image_shape.push_back(batch_size);
  image_shape.insert(image_shape.end(), sample_shape.begin(), sample_shape.end());
  int64_t numel = 1;
  for (int64_t d : image_shape) numel *= d;
  image_bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  labels_offset = align8(image_bytes);
  bytes = labels_offset + batch_size * 8;
}

at::Tensor SlotLayout::images(const at::Tensor& slot_bytes) const {
  return slot_bytes.narrow(0, 0, image_bytes).view(dtype).view(image_shape);
}

namespace {
data::PixelFormat format_of(c10::ScalarType dtype) {
  return dtype == c10::kByte ? data::PixelFormat::kUint8Hwc : data::PixelFormat::kFloat32Chw;
}
}  // namespace

int64_t SlotLayout::image_bytes_at(int side) const {
  const int64_t bytes = batch_size * static_cast<int64_t>(data::bytes_per_image(format_of(dtype), side));
  TORCH_CHECK(bytes <= image_bytes, "a batch at side ", side, " does not fit its slot");
  return bytes;
}

at::Tensor SlotLayout::images(const at::Tensor& slot_bytes, int side) const {
  std::vector<int64_t> shape = sample_format(format_of(dtype), side).shape;
  shape.insert(shape.begin(), batch_size);
  return slot_bytes.narrow(0, 0, image_bytes_at(side)).view(dtype).view(shape);
}

at::Tensor SlotLayout::labels(const at::Tensor& slot_bytes) const {
  return slot_bytes.narrow(0, labels_offset, batch_size * 8).view(c10::kLong);
}

HostRing::HostRing(int slots, int64_t batch_size, const std::vector<int64_t>& sample_shape, c10::ScalarType dtype,
                   bool pinned, bool encoded)
    : layout_(batch_size, sample_shape, dtype), pinned_(pinned) {
  if (encoded) encoded_.resize(slots, std::vector<data::EncodedImage>(batch_size));
  for (int i = 0; i < slots; ++i) {
    slots_.push_back(pinned ? gpu::pinned_empty({layout_.bytes}, c10::kByte)
                            : at::empty({layout_.bytes}, at::TensorOptions().dtype(c10::kByte)));
    free_.push_back(i);
  }
}

data::BatchMemory HostRing::memory(int slot) {
  auto* base = static_cast<uint8_t*>(slots_[slot].data_ptr());
  return {base, reinterpret_cast<int64_t*>(base + layout_.labels_offset),
          encoded_.empty() ? nullptr : encoded_[slot].data()};
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

// A fixed ring of host batch buffers (page-locked or pageable) that the loader's workers fill in place.
// A slot is handed out again only after the copy that read it has completed (its fence).
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "data/loader/batch_arena.h"
#include "data/transform/transforms.h"

namespace pinfeed::pipeline {

// Where a batch lives inside one slot's bytes: the images, then (8-byte aligned) the labels. One buffer per
// slot means one host-to-device copy per batch; the same layout reads the slot's bytes on either side.
struct SlotLayout {
  std::vector<int64_t> image_shape;  // (batch_size, sample_shape...)
  c10::ScalarType dtype = c10::kFloat;
  int64_t batch_size = 0;
  int64_t image_bytes = 0;    // all images of the slot
  int64_t labels_offset = 0;  // image_bytes rounded up to 8
  int64_t bytes = 0;          // labels_offset + batch_size * 8

  SlotLayout(int64_t batch_size, const std::vector<int64_t>& sample_shape, c10::ScalarType dtype);
  // Views into a (bytes,) uint8 tensor holding a slot, on any device.
  at::Tensor images(const at::Tensor& slot_bytes) const;  // (B, ...) of dtype
  at::Tensor images(const at::Tensor& slot_bytes, int side) const;  // a batch at a smaller side, from the front
  int64_t image_bytes_at(int side) const;                           // what those images take
  at::Tensor labels(const at::Tensor& slot_bytes) const;  // (B,) int64
};

// How one decoded sample lies in a slot: (S, S, 3) uint8 HWC, or (3, S, S) float32 CHW.
struct SampleFormat {
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
};
SampleFormat sample_format(data::PixelFormat format, int side);

class HostRing : public data::BatchArena {
 public:
  // Each slot: images (batch_size, sample_shape...) of `dtype`, labels (batch_size,) int64.
  // pinned: allocated with gpu::pinned_empty (throws if that fails). encoded: each slot also holds batch_size
  // EncodedImage records, for a dataset that leaves JPEGs to the GPU (TransformOptions::gpu_decode).
  HostRing(int slots, int64_t batch_size, const std::vector<int64_t>& sample_shape, c10::ScalarType dtype,
           bool pinned, bool encoded = false);

  bool pinned() const { return pinned_; }
  int64_t bytes() const { return layout_.bytes * slots(); }  // everything allocated
  const SlotLayout& layout() const { return layout_; }
  at::Tensor slot_bytes(int slot) const { return slots_[slot]; }  // (layout().bytes,) uint8
  at::Tensor images(int slot) const { return layout_.images(slots_[slot]); }
  at::Tensor labels(int slot) const { return layout_.labels(slots_[slot]); }
  const std::vector<data::EncodedImage>& encoded(int slot) const { return encoded_[slot]; }  // empty unless encoded

  // data::BatchArena
  int slots() const override { return static_cast<int>(slots_.size()); }
  data::BatchMemory memory(int slot) override;
  std::optional<int> try_acquire() override;
  std::optional<int> acquire() override;
  void release(int slot, std::shared_ptr<data::Fence> fence) override;

 private:
  SlotLayout layout_;
  std::vector<at::Tensor> slots_;
  std::vector<std::vector<data::EncodedImage>> encoded_;  // per slot, when encoded
  bool pinned_;
  std::mutex mutex_;
  std::deque<int> free_;                                              // reusable now
  std::deque<std::pair<int, std::shared_ptr<data::Fence>>> fenced_;  // released, oldest first
};

// Bytes a ring of `slots` would allocate, for checking the budget before allocating.
int64_t ring_bytes(int slots, int64_t batch_size, size_t image_bytes);
// A ring's slots for a loader deciding prefetch_batches ahead: those, one being copied, one being computed on.
inline int ring_slots(int prefetch_batches) { return prefetch_batches + 2; }
// Whether host batch rings of `bytes` in all fit a machine of `memory` bytes (HostMemory::total; 0: unknown, taken
// as fitting): in half of it, the rest being for the decode workers' scratch, the dataset index, the model and its
// optimizer state on the CPU, LibTorch and the OS.
inline bool host_rings_fit(double bytes, double memory) { return memory <= 0 || bytes <= memory / 2; }

}  // namespace pinfeed::pipeline

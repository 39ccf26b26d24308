// A training batch's augmentations, as the Feeder applies them on the batch's device: the draws made on the host
// from the batch's keys (options.h: DrawKeys), uploaded in one non-blocking copy from pinned memory, then each op
// applied once to the group of images that drew it (pixel_ops.h) — no host synchronisation, no launch per image.
// The same code runs on CPU tensors: tests hold it against torchvision and timm there, and the CUDA path to it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "pipeline/augment/erasing.h"
#include "pipeline/augment/mixup.h"
#include "pipeline/augment/options.h"
#include "pipeline/augment/pixel_ops.h"
#include "pipeline/augment/policy.h"

namespace pinfeed::pipeline::augment {

// One batch's draws, host side.
struct BatchDraws {
  int64_t epoch = 0, index = 0, size = 0;
  int side = 0;
  std::vector<std::vector<OpDraw>> ops;  // per image, in the order they apply (empty: the policy is off)
  std::vector<ErasingBox> erasing;       // per image (empty: erasing is off)
  MixDraw mix;
  uint64_t noise_seed = 0;  // erasing's random values
};

// The draws' parameters on the batch's device.
struct DeviceDraws {
  struct Group {  // the images of the batch one op kind applies to, in one round
    Kind kind = Kind::kNone;
    at::Tensor index;   // (n,) int64
    at::Tensor params;  // (n, kParams) float32
  };
  std::vector<std::vector<Group>> rounds;  // applied in order; a round's groups are disjoint
  at::Tensor erase_index, erase_boxes;     // (m,) and (m, 4) int64
};

// The stream names of the draws: one each, so that turning one augmentation on leaves the others' draws alone.
enum class Purpose : uint64_t { kPixelOps = 0xA0A0, kErasing = 0xE4A5, kNoise = 0x4015E, kMix = 0x313C };

class Augmenter {
 public:
  Augmenter(AugmentOptions options, DrawKeys keys, c10::Device device);
  const AugmentOptions& options() const { return options_; }

  // The draws of batch `index` of `epoch` (size images of side x side), from the keys alone.
  BatchDraws draw(int64_t epoch, int64_t index, int64_t size, int side) const;
  // Uploads the draws' parameters, issued on the device's current stream (pinned host memory on CUDA).
  DeviceDraws upload(const BatchDraws& draws) const;
  // The policy's ops on the uint8 pixels, (B, S, S, 3) on the device, in place.
  void apply_pixels(at::Tensor& pixels, const DeviceDraws& device_draws) const;
  // Erasing, then Mixup/CutMix on the normalised batch (B, C, S, S) floating: images replaced or changed in
  // place, labels (B,) int64 replaced by (B, num_classes) float32 soft targets when mixing.
  void apply_batch(at::Tensor& images, at::Tensor& labels, const BatchDraws& draws, const DeviceDraws& device_draws) const;
  // apply_batch's labels alone, for a batch whose images normalise_mix.h mixed (no erasing).
  void apply_labels(at::Tensor& labels, const BatchDraws& draws) const;

 private:
  const OpSpace& space(int side) const;

  AugmentOptions options_;
  DrawKeys keys_;
  c10::Device device_;
  PixelOpOptions pixel_options_;
  mutable std::map<int, std::unique_ptr<OpSpace>> spaces_;  // by side; filled on the one thread that draws
};

}  // namespace pinfeed::pipeline::augment

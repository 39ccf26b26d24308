// torchvision's RandomErasing (transforms/transforms.py) on the normalised batch, as its classification recipe
// places it after Normalize: each image, with probability p, gets one box of zeros or of standard normal values.
// The boxes are drawn on the host; the batch is erased with ATen ops on its own device, for every image at once.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>

#include "data/transform/sample_rng.h"
#include "pipeline/augment/options.h"

namespace pinfeed::pipeline::augment {

struct ErasingBox {
  int top = 0, left = 0, height = 0, width = 0;  // height 0: not erased
  bool erased() const { return height > 0 && width > 0; }
};

// RandomErasing.forward for one (C, height, width) image: erased with probability p, the box from get_params
// (10 tries at an area fraction in [scale_min, scale_max] and a log-uniform aspect ratio, rounded half to even;
// none fitting: not erased).
ErasingBox draw_erasing(const AugmentOptions& options, int height, int width, data::SampleRng& rng);

// images: (B, C, H, W) floating, erased in place. index: (m,) int64, the erased images; boxes: (m, 4) int64,
// top, left, height, width of each; both on the images' device. `noise` (ErasingValue::kRandom only): the
// generator of the normal values, of the images' device type.
void erase(at::Tensor& images, const at::Tensor& index, const at::Tensor& boxes, ErasingValue value,
           std::optional<at::Generator> noise);

}  // namespace pinfeed::pipeline::augment

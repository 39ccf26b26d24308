// torchvision's augmentation ops (transforms/autoaugment.py _apply_op, transforms/_functional_tensor.py) on a
// group of uint8 images at once, each with its own magnitude: ATen ops only, so that the one definition runs on
// the CPU (where tests hold it against torchvision) and on the GPU (inside the Feeder). No host synchronisation:
// the parameters arrive as a tensor on the images' device.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

#include "pipeline/augment/options.h"

namespace pinfeed::pipeline::augment {

// Every op of the three policies' spaces, by torchvision's names (op_name).
enum class Op : uint8_t {
  kIdentity, kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kBrightness, kColor, kContrast, kSharpness,
  kPosterize, kSolarize, kAutoContrast, kEqualize, kInvert,
};
inline constexpr int kOps = 15;
const char* op_name(Op op);

// How an op is computed: the five geometric ops are one affine warp with per-image matrices.
enum class Kind : uint8_t {
  kNone, kAffine, kBrightness, kColor, kContrast, kSharpness, kPosterize, kSolarize, kAutoContrast, kEqualize,
  kInvert,
};
inline constexpr int kKinds = 11;
Kind kind_of(Op op);

// An op's per-image parameters as kParams floats, computed on the host in double as torchvision does and
// rounded once to float32, as its tensors are: affine, torchvision's inverse matrix (six values); the colour
// ops, the factor 1 + magnitude and 1 - factor; posterize, its bit mask; solarize, the threshold.
inline constexpr int kParams = 6;
using OpParams = std::array<float, kParams>;
// magnitude: signed, as _apply_op receives it; width, height: the image's.
OpParams op_params(Op op, double magnitude, int width, int height);

struct PixelOpOptions {
  Interpolation interpolation = Interpolation::kNearest;
  Fill fill;
};

// images: (n, 3, H, W) uint8, any strides; params: (n, kParams) float32 on the same device. Returns the n
// images after the op, (n, 3, H, W) uint8.
at::Tensor apply_kind(Kind kind, const at::Tensor& images, const at::Tensor& params, const PixelOpOptions& options);

}  // namespace pinfeed::pipeline::augment

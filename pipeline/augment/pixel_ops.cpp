#include "pipeline/augment/pixel_ops.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/avg_pool2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/grid_sampler.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace pinfeed::pipeline::augment {
namespace {

// CPython's math.radians and math.degrees: a multiply by these constants.
constexpr double kPi = 3.14159265358979323846;
constexpr double kDegToRad = kPi / 180.0;
constexpr double kRadToDeg = 180.0 / kPi;

// torchvision functional.py _get_inverse_affine_matrix(center, angle, translate, scale=1, shear), inverted=True,
// term for term in double, as Python evaluates it.
std::array<double, 6> inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                                     double shear_y) {
  const double rot = angle * kDegToRad, sx = shear_x * kDegToRad, sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d, -b, 0.0, -c, a, 0.0};  // divided by the scale, 1.0
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

OpParams to_float(const std::array<double, 6>& m) {
  OpParams p{};
  for (int i = 0; i < 6; ++i) p[i] = static_cast<float>(m[i]);
  return p;
}

// A few values as a tensor made on `options`' device by fills: at::tensor would copy them from pageable memory,
// which makes the host wait for the stream.
at::Tensor small_tensor(const std::vector<double>& values, const at::TensorOptions& options) {
  at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, options);
  for (size_t i = 0; i < values.size(); ++i) t[static_cast<int64_t>(i)].fill_(values[i]);
  return t;
}

// Parameter k of each image, shaped to broadcast over (n, C, H, W).
at::Tensor per_image(const at::Tensor& params, int k) { return params.select(1, k).view({-1, 1, 1, 1}); }

// _functional_tensor.py _blend: (ratio * img1 + (1.0 - ratio) * img2).clamp(0, 255).to(uint8), the factor and
// 1 - factor being params 0 and 1.
at::Tensor blend(const at::Tensor& img1, const at::Tensor& img2, const at::Tensor& params) {
  return at::add(at::mul(img1, per_image(params, 0)), at::mul(img2, per_image(params, 1))).clamp(0, 255).to(at::kByte);
}

// _functional_tensor.py rgb_to_grayscale: (0.2989 r + 0.587 g + 0.114 b) truncated to uint8, (n, 1, H, W).
at::Tensor grayscale(const at::Tensor& img) {
  const at::Tensor l = at::mul(img.select(1, 0), 0.2989) + at::mul(img.select(1, 1), 0.587) + at::mul(img.select(1, 2), 0.114);
  return l.to(at::kByte).unsqueeze(1);
}

// _functional_tensor.py _gen_affine_grid with one matrix per image: (n, H, W, 2) float32.
at::Tensor affine_grid(const at::Tensor& theta, int64_t h, int64_t w) {
  const auto f = theta.options();
  const double d = 0.5;
  at::Tensor base = at::empty({1, h, w, 3}, f);
  base.select(3, 0).copy_(at::linspace(-w * 0.5 + d, w * 0.5 + d - 1, w, f));
  base.select(3, 1).copy_(at::linspace(-h * 0.5 + d, h * 0.5 + d - 1, h, f).unsqueeze(-1));
  base.select(3, 2).fill_(1);
  const at::Tensor rescaled = theta.transpose(1, 2) / small_tensor({0.5 * static_cast<double>(w), 0.5 * static_cast<double>(h)}, f);
  const int64_t n = theta.size(0);
  return base.view({1, h * w, 3}).expand({n, h * w, 3}).bmm(rescaled).view({n, h, w, 2});
}

// _functional_tensor.py affine via _apply_grid_transform: grid_sample with zero padding; a fill through a mask
// channel (nearest: where the mask is under 0.5; bilinear: blended by it); rounded back to uint8.
at::Tensor affine(const at::Tensor& images, const at::Tensor& params, const PixelOpOptions& o) {
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const at::Tensor grid = affine_grid(params.view({n, 2, 3}), h, w);
  at::Tensor img = images.to(at::kFloat);
  if (o.fill) img = at::cat({img, at::ones({n, 1, h, w}, img.options())}, 1);
  const bool nearest = o.interpolation == Interpolation::kNearest;
  img = at::grid_sampler(img, grid, /*interpolation_mode=*/nearest ? 1 : 0, /*padding_mode=*/0, /*align_corners=*/false);
  if (o.fill) {
    const at::Tensor mask = img.narrow(1, 3, 1).expand({n, 3, h, w});
    img = img.narrow(1, 0, 3);
    const at::Tensor fill = small_tensor({(*o.fill)[0], (*o.fill)[1], (*o.fill)[2]}, img.options()).view({1, 3, 1, 1});
    img = nearest ? at::where(mask < 0.5, fill, img) : img * mask + (1.0 - mask) * fill;
  }
  return img.round().to(at::kByte);
}

// _functional_tensor.py adjust_sharpness: blended with the image blurred by [[1,1,1],[1,5,1],[1,1,1]] / 13
// (rounded to uint8), whose one-pixel border is the image's own. The blur as (9 x the 3x3 mean + 4 x the centre)
// / 13 rather than a convolution: the exact value, an integer over 13, is never within 1/26 of a rounding edge,
// so any float sum rounds as torchvision's does; and a pooling has no per-shape cuDNN autotuning, which a
// convolution of each batch's group size would start (train.cudnn_benchmark).
at::Tensor sharpness(const at::Tensor& images, const at::Tensor& params) {
  const int64_t h = images.size(2), w = images.size(3);
  const at::Tensor x = images.to(at::kFloat);
  const at::Tensor centre = x.narrow(2, 1, h - 2).narrow(3, 1, w - 2);
  const at::Tensor sum = at::avg_pool2d(x, {3, 3}, {1, 1}).mul_(9).add_(centre, 4);
  at::Tensor degenerate = images.clone();
  degenerate.narrow(2, 1, h - 2).narrow(3, 1, w - 2).copy_(sum.div_(13).round_().to(at::kByte));
  return blend(images, degenerate, params);
}

// _functional_tensor.py autocontrast: each channel stretched from its [min, max] to [0, 255]; a flat channel kept.
at::Tensor autocontrast(const at::Tensor& images) {
  at::Tensor minimum = images.amin({2, 3}, /*keepdim=*/true).to(at::kFloat);
  const at::Tensor maximum = images.amax({2, 3}, /*keepdim=*/true).to(at::kFloat);
  at::Tensor scale = (maximum - minimum).reciprocal() * 255;  // Python's 255 / t is t.reciprocal() * 255
  const at::Tensor flat = at::isfinite(scale).logical_not();
  minimum = at::where(flat, at::zeros({}, minimum.options()), minimum);
  scale = at::where(flat, at::ones({}, scale.options()), scale);
  return ((images - minimum) * scale).clamp(0, 255).to(at::kByte);
}

// _functional_tensor.py equalize (_scale_channel) for every channel of every image at once: a 256-bin histogram
// per row, the cumulative lookup table, a channel with one value left as it is.
at::Tensor equalize(const at::Tensor& images) {
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3), rows = n * c;
  const auto i64 = images.options().dtype(at::kLong);
  const at::Tensor pixels = images.reshape({rows, h * w}).to(at::kLong).contiguous();  // a view for one image
  const at::Tensor bins = pixels + at::arange(rows, i64).mul_(256).view({rows, 1});
  at::Tensor hist = at::zeros({rows * 256}, i64);
  hist.index_add_(0, bins.view(-1), at::ones_like(bins).view(-1));
  hist = hist.view({rows, 256});
  // The histogram's nonzero bins but the last sum to everything but the bin of the channel's highest value.
  const at::Tensor last = images.amax({2, 3}).reshape({rows, 1}).to(at::kLong);
  const at::Tensor step = (h * w - hist.gather(1, last)).div(255, "floor");
  const at::Tensor flat = step.eq(0);
  const at::Tensor divisor = at::where(flat, at::ones({}, i64), step);
  at::Tensor lut = (hist.cumsum(1) + step.div(2, "floor")).div(divisor, "floor");
  lut = at::cat({at::zeros({rows, 1}, i64), lut.narrow(1, 0, 255)}, 1).clamp(0, 255);
  lut = at::where(flat, at::arange(256, i64).view({1, 256}), lut);
  return lut.gather(1, pixels).to(at::kByte).reshape({n, c, h, w});
}

}  // namespace

const char* op_name(Op op) {
  static const char* const names[kOps] = {"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY",
                                          "Rotate", "Brightness", "Color", "Contrast", "Sharpness",
                                          "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert"};
  return names[static_cast<int>(op)];
}

Kind kind_of(Op op) {
  switch (op) {
    case Op::kIdentity: return Kind::kNone;
    case Op::kShearX: case Op::kShearY: case Op::kTranslateX: case Op::kTranslateY: case Op::kRotate:
      return Kind::kAffine;
    case Op::kBrightness: return Kind::kBrightness;
    case Op::kColor: return Kind::kColor;
    case Op::kContrast: return Kind::kContrast;
    case Op::kSharpness: return Kind::kSharpness;
    case Op::kPosterize: return Kind::kPosterize;
    case Op::kSolarize: return Kind::kSolarize;
    case Op::kAutoContrast: return Kind::kAutoContrast;
    case Op::kEqualize: return Kind::kEqualize;
    case Op::kInvert: return Kind::kInvert;
  }
  return Kind::kNone;
}

OpParams op_params(Op op, double magnitude, int width, int height) {
  // autoaugment.py _apply_op: how each op reads its magnitude.
  switch (op) {
    case Op::kShearX:  // F.affine(shear=[degrees(atan(m)), 0], center=[0, 0]): the centre is the top-left corner
      return to_float(inverse_affine(-width * 0.5, -height * 0.5, 0.0, 0.0, 0.0, std::atan(magnitude) * kRadToDeg, 0.0));
    case Op::kShearY:
      return to_float(inverse_affine(-width * 0.5, -height * 0.5, 0.0, 0.0, 0.0, 0.0, std::atan(magnitude) * kRadToDeg));
    case Op::kTranslateX:  // F.affine(translate=[int(m), 0]): whole pixels, truncated toward zero
      return to_float(inverse_affine(0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 0.0, 0.0));
    case Op::kTranslateY:
      return to_float(inverse_affine(0.0, 0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 0.0));
    case Op::kRotate:  // F.rotate(m): the inverse matrix of angle -m about the centre
      return to_float(inverse_affine(0.0, 0.0, -magnitude, 0.0, 0.0, 0.0, 0.0));
    case Op::kBrightness: case Op::kColor: case Op::kContrast: case Op::kSharpness: {
      const double factor = 1.0 + magnitude;
      return {static_cast<float>(factor), static_cast<float>(1.0 - factor), 0, 0, 0, 0};
    }
    case Op::kPosterize: {  // F.posterize(int(m)): img & -(2 ** (8 - bits))
      const int bits = static_cast<int>(std::trunc(magnitude));
      return {static_cast<float>((0xFF << (8 - bits)) & 0xFF), 0, 0, 0, 0, 0};
    }
    case Op::kSolarize:
      return {static_cast<float>(magnitude), 0, 0, 0, 0, 0};
    default:
      return {};
  }
}

at::Tensor apply_kind(Kind kind, const at::Tensor& images, const at::Tensor& params, const PixelOpOptions& o) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3 && images.scalar_type() == at::kByte,
              "augment: images must be (n, 3, H, W) uint8, got ", images.sizes(), " ", images.scalar_type());
  switch (kind) {
    case Kind::kNone: return images;
    case Kind::kAffine: return affine(images, params, o);
    case Kind::kBrightness: return at::mul(images, per_image(params, 0)).clamp(0, 255).to(at::kByte);  // blend with 0
    case Kind::kColor: return blend(images, grayscale(images).expand_as(images), params);
    case Kind::kContrast: {
      const at::Tensor mean = grayscale(images).to(at::kFloat).mean({1, 2, 3}, /*keepdim=*/true);
      return blend(images, mean, params);
    }
    case Kind::kSharpness: return sharpness(images, params);
    case Kind::kPosterize: return images.bitwise_and(per_image(params, 0).to(at::kByte));
    case Kind::kSolarize: return at::where(images.ge(per_image(params, 0)), 255 - images, images);
    case Kind::kAutoContrast: return autocontrast(images);
    case Kind::kEqualize: return equalize(images);
    case Kind::kInvert: return 255 - images;
  }
  throw std::logic_error("augment: unknown op kind");
}

}  // namespace pinfeed::pipeline::augment

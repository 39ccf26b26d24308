#include "pipeline/augment/mixup.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/add.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cmath>

namespace pinfeed::pipeline::augment {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

double normal(data::SampleRng& rng) {  // Box-Muller
  const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();  // u1 in (0, 1]
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// Gamma(a, 1) for a >= 1 by Marsaglia and Tsang (2000).
double sample_gamma(double a, data::SampleRng& rng) {
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

// Gamma(a, 1) for a < 1 as Marsaglia and Tsang's Gamma(a + 1) U^(1/a), kept as its two factors' draws: the
// product underflows to 0 for a far below 1, while their logs stay finite.
struct SmallGamma {
  double g, u;  // g: Gamma(a + 1); u in (0, 1]
  double value(double a) const { return g * std::pow(u, 1.0 / a); }
};

SmallGamma sample_small_gamma(double a, data::SampleRng& rng) {
  const double g = sample_gamma(a + 1.0, rng);
  return {g, 1.0 - rng.uniform()};
}

}  // namespace

double sample_beta(double a, data::SampleRng& rng) {
  if (a >= 1.0) {
    const double x = sample_gamma(a, rng), y = sample_gamma(a, rng);
    return x / (x + y);
  }
  const SmallGamma gx = sample_small_gamma(a, rng), gy = sample_small_gamma(a, rng);
  const double x = gx.value(a), y = gy.value(a);
  if (x + y > 0) return x / (x + y);
  // Both underflowed (a far below 1, where Beta(a, a) is almost surely within a hair of 0 or 1): x / (x + y) as
  // 1 / (1 + y / x) with log(y / x) from the logs, times a so that no term is infinite (1 / a may be).
  const double log_ratio = (a * std::log(gy.g) + std::log(gy.u) - a * std::log(gx.g) - std::log(gx.u)) / a;
  return 1.0 / (1.0 + std::exp(log_ratio));
}

MixDraw draw_mix(const AugmentOptions& o, int height, int width, data::SampleRng& rng) {
  MixDraw d;
  if (!o.mixing() || !(rng.uniform() < o.mix_prob)) return d;  // _params_per_batch
  if (o.mixup_alpha > 0 && o.cutmix_alpha > 0) {
    d.cutmix = rng.uniform() < o.switch_prob;
    d.lam = sample_beta(d.cutmix ? o.cutmix_alpha : o.mixup_alpha, rng);
  } else if (o.mixup_alpha > 0) {
    d.lam = sample_beta(o.mixup_alpha, rng);
  } else {
    d.cutmix = true;
    d.lam = sample_beta(o.cutmix_alpha, rng);
  }
  d.beta = d.lam;
  if (!d.mixed() || !d.cutmix) return d;  // _mix_batch: lam == 1 leaves the batch alone
  // rand_bbox (margin 0), then cutmix_bbox_and_lam's correction for the part of the box inside the image.
  const double ratio = std::sqrt(1.0 - d.lam);
  const int cut_h = static_cast<int>(height * ratio), cut_w = static_cast<int>(width * ratio);
  d.cy = static_cast<int>(rng.below(height));
  d.cx = static_cast<int>(rng.below(width));
  d.yl = std::clamp(d.cy - cut_h / 2, 0, height);
  d.yh = std::clamp(d.cy + (cut_h + 1) / 2, 0, height);
  d.xl = std::clamp(d.cx - cut_w / 2, 0, width);
  d.xh = std::clamp(d.cx + (cut_w + 1) / 2, 0, width);
  d.lam = 1.0 - static_cast<double>((d.yh - d.yl) * (d.xh - d.xl)) / static_cast<double>(height * width);
  return d;
}

void mix(at::Tensor& images, at::Tensor& labels, const MixDraw& d, int64_t num_classes, double smoothing) {
  if (d.mixed() && d.cutmix) {
    // x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]: the flip copies the box before it is written
    at::Tensor box = images.narrow(2, d.yl, d.yh - d.yl).narrow(3, d.xl, d.xh - d.xl);
    box.copy_(box.flip(0));
  } else if (d.mixed()) {
    // x_flipped = x.flip(0).mul_(1 - lam); x.mul_(lam).add_(x_flipped)
    images = at::add(images.mul(d.lam), images.flip(0).mul(1.0 - d.lam));
  }
  labels = soft_targets(labels, d, num_classes, smoothing);
}

at::Tensor soft_targets(const at::Tensor& labels, const MixDraw& d, int64_t num_classes, double smoothing) {
  // mixup_target: one_hot(target, on = 1 - smoothing + off, off = smoothing / classes), y1 lam + y2 (1 - lam)
  const double off = smoothing / static_cast<double>(num_classes), on = 1.0 - smoothing + off;
  const at::Tensor y1 = at::full({labels.size(0), num_classes}, off, labels.options().dtype(at::kFloat))
                            .scatter_(1, labels.view({-1, 1}), on);
  return at::add(y1.mul(d.lam), y1.flip(0).mul(1.0 - d.lam));
}

}  // namespace pinfeed::pipeline::augment

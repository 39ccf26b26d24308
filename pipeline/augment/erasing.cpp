#include "pipeline/augment/erasing.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <cmath>

namespace pinfeed::pipeline::augment {

ErasingBox draw_erasing(const AugmentOptions& o, int height, int width, data::SampleRng& rng) {
  ErasingBox box;
  if (!(rng.uniform() < o.erasing_p)) return box;  // forward: torch.rand(1) < self.p
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(o.erasing_ratio_min), log_hi = std::log(o.erasing_ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {  // get_params
    const double erase_area = area * rng.uniform(o.erasing_scale_min, o.erasing_scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    // Python's round(): half to even, as std::nearbyint in the default rounding mode.
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height && w < width)) continue;
    box.height = h;
    box.width = w;
    box.top = static_cast<int>(rng.below(height - h + 1));
    box.left = static_cast<int>(rng.below(width - w + 1));
    return box;
  }
  return box;  // no box fitted: the image as it was
}

void erase(at::Tensor& images, const at::Tensor& index, const at::Tensor& boxes, ErasingValue value,
           std::optional<at::Generator> noise) {
  const int64_t m = index.numel();
  if (m == 0) return;
  const int64_t h = images.size(2), w = images.size(3);
  const auto i64 = boxes.options();
  const at::Tensor rows = at::arange(h, i64).view({1, 1, h, 1}), cols = at::arange(w, i64).view({1, 1, 1, w});
  const auto column = [&](int k) { return boxes.select(1, k).view({m, 1, 1, 1}); };
  const at::Tensor top = column(0), left = column(1);
  const at::Tensor inside = rows.ge(top) & rows.lt(top + column(2)) & cols.ge(left) & cols.lt(left + column(3));
  at::Tensor chosen = images.index_select(0, index);
  // F.erase: img[..., i:i+h, j:j+w] = v, v zeros or normal_() values.
  const at::Tensor v = value == ErasingValue::kRandom ? at::randn(chosen.sizes(), noise, chosen.options())
                                                      : at::zeros({}, chosen.options());
  chosen = at::where(inside, v, chosen);
  images.index_copy_(0, index, chosen);
}

}  // namespace pinfeed::pipeline::augment

// timm's Mixup and CutMix (timm/data/mixup.py, class Mixup with mode="batch") on the normalised batch: one draw
// per batch, every image mixed with the batch's mirror image (x.flip(0)), and the labels made soft targets with
// label smoothing folded in (mixup_target). The draw is made on the host; the batch is mixed on its own device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "data/transform/sample_rng.h"
#include "pipeline/augment/options.h"

namespace pinfeed::pipeline::augment {

struct MixDraw {
  bool cutmix = false;  // CutMix (a box from the mirror image), else Mixup (a blend with it)
  double beta = 1.0;    // the Beta draw: timm's lam before CutMix's correction; 1: not mixed
  double lam = 1.0;     // the share of the batch's own image; 1: not mixed. CutMix: corrected for the box
  int cy = 0, cx = 0;   // rand_bbox's centre draws (CutMix)
  int yl = 0, yh = 0, xl = 0, xh = 0;  // the box, rows [yl, yh) and columns [xl, xh) (CutMix)
  bool mixed() const { return lam != 1.0; }
};

// Mixup._params_per_batch, then for CutMix cutmix_bbox_and_lam (rand_bbox, correct_lam=True), for images of
// height x width. Beta draws by Marsaglia-Tsang gammas from rng (numpy's own algorithm differs; the law is the same).
MixDraw draw_mix(const AugmentOptions& options, int height, int width, data::SampleRng& rng);

// Beta(a, a), any a > 0, in bounded time: for a far below 1 (about 1e-3 and less) mostly exactly 0 or 1, where
// Beta(a, a) puts nearly all its mass.
double sample_beta(double a, data::SampleRng& rng);

// images: (B, C, H, W) floating, mixed (CutMix in place; Mixup replaces it). labels: (B,) int64 class indices,
// replaced by (B, num_classes) float32 soft targets (mixup_target: one_hot with smoothing, then y1 lam +
// y1.flip(0) (1 - lam)), also for a batch left unmixed.
void mix(at::Tensor& images, at::Tensor& labels, const MixDraw& draw, int64_t num_classes, double label_smoothing);
// mix()'s labels alone: (B,) int64 class indices -> (B, num_classes) float32 soft targets.
at::Tensor soft_targets(const at::Tensor& labels, const MixDraw& draw, int64_t num_classes, double label_smoothing);

}  // namespace pinfeed::pipeline::augment

// The modern recipe's augmentations, applied by the Feeder to a training batch on its device after decode and
// crop: torchvision's AutoAugment / RandAugment / TrivialAugmentWide on the uint8 pixels, then torchvision's
// RandomErasing and timm's Mixup/CutMix on the normalised batch. What the config asks for (data.auto_augment,
// data.random_erasing, data.mixup_alpha, ...); validation batches never get any.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace pinfeed::pipeline::augment {

enum class Policy { kNone, kTrivialAugmentWide, kRandAugment, kAutoAugmentImageNet };

// data.auto_augment: "" | "trivial" | "rand-mM-nN" | "imagenet".
struct PolicyOptions {
  Policy policy = Policy::kNone;
  int rand_ops = 2;        // RandAugment's N: ops per image
  int rand_magnitude = 9;  // RandAugment's M: a bin of kRandAugmentBins (torchvision's default 9 of 31)
  bool operator==(const PolicyOptions& o) const {
    return policy == o.policy && rand_ops == o.rand_ops && rand_magnitude == o.rand_magnitude;
  }
};
inline constexpr int kRandAugmentBins = 31;  // torchvision RandAugment's num_magnitude_bins default
inline constexpr int kMaxRandOps = 16;

// Throws std::invalid_argument("must be ..., got ...") for anything else.
PolicyOptions parse_policy(const std::string& text);
std::string policy_text(const PolicyOptions& policy);  // parse_policy's inverse

enum class Interpolation { kNearest, kBilinear };  // torchvision's tensor ops support these two
enum class ErasingValue { kZero, kRandom };        // RandomErasing's value=0 | value="random"

// data.augment_fill: "" (torchvision's fill=None) | "N" | "R,G,B", each in [0, 255]. Throws std::invalid_argument.
using Fill = std::optional<std::array<float, 3>>;
Fill parse_fill(const std::string& text);
std::string fill_text(const Fill& fill);

// data.mixup_alpha's and data.cutmix_alpha's bound (Beta(100, 100) is a lambda of 0.5 +- 0.035: far past use).
inline constexpr double kMaxMixAlpha = 100;

struct AugmentOptions {
  PolicyOptions auto_augment;
  Interpolation interpolation = Interpolation::kNearest;  // the geometric ops' sampling (torchvision: nearest)
  Fill fill;                                              // outside the moved image; unset: zeros, as torchvision's None
  // torchvision RandomErasing, on the normalised batch (as in its classification recipe, after Normalize).
  double erasing_p = 0;  // 0: off
  ErasingValue erasing_value = ErasingValue::kZero;
  double erasing_scale_min = 0.02, erasing_scale_max = 0.33;  // torchvision's defaults
  double erasing_ratio_min = 0.3, erasing_ratio_max = 3.3;
  // timm Mixup, mode "batch": one lambda and one box per batch, each sample mixed with the batch's mirror image.
  double mixup_alpha = 0, cutmix_alpha = 0;  // Beta(alpha, alpha); 0: that one off
  double mix_prob = 1.0;                     // of mixing a batch at all (timm's prob)
  double switch_prob = 0.5;                  // of CutMix over Mixup when both are on
  // Set by whoever builds the training Feeder, not by keys: the soft targets' width and train.label_smoothing,
  // folded into them as timm's mixup_target does (the loss then smooths nothing more).
  int64_t num_classes = 0;
  double label_smoothing = 0;

  bool pixel_ops() const { return auto_augment.policy != Policy::kNone; }
  bool erasing() const { return erasing_p > 0; }
  bool mixing() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
  bool any() const { return pixel_ops() || erasing() || mixing(); }
};

// The draws of a batch come from (train.seed, epoch, the sample's position on this rank), whatever the workers,
// the transfer mode or a resume: each augmentation from its own stream, so that turning one on leaves the
// others' draws as they were.
struct DrawKeys {
  uint64_t seed = 0;
  int64_t batch_size = 0;  // positions: batch index x batch_size + place in the batch
  int shard_rank = 0, shards = 1;
};

}  // namespace pinfeed::pipeline::augment

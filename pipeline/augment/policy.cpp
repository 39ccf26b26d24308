#include "pipeline/augment/policy.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/linspace.h>

#include <stdexcept>

namespace pinfeed::pipeline::augment {
namespace {

// A float32 table as torch.linspace(lo, hi, n) makes it.
std::vector<float> linspace(double lo, double hi, int n) {
  const at::Tensor t = at::linspace(lo, hi, n, at::TensorOptions().dtype(at::kFloat)).contiguous();
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + n);
}

// 8 - (torch.arange(n) / ((n - 1) / levels)).round().int(): Posterize's bits.
std::vector<float> posterize_bits(int n, double levels) {
  const at::Tensor t = (8 - at::arange(n).div((n - 1) / levels).round().to(at::kInt)).to(at::kFloat).contiguous();
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + n);
}

// AutoAugmentPolicy.IMAGENET's sub-policies: two (op, probability, magnitude bin of 10 or -1) each.
struct SubOp {
  Op op;
  double p;
  int bin;
};
constexpr SubOp kImageNet[25][2] = {
    {{Op::kPosterize, 0.4, 8}, {Op::kRotate, 0.6, 9}},
    {{Op::kSolarize, 0.6, 5}, {Op::kAutoContrast, 0.6, -1}},
    {{Op::kEqualize, 0.8, -1}, {Op::kEqualize, 0.6, -1}},
    {{Op::kPosterize, 0.6, 7}, {Op::kPosterize, 0.6, 6}},
    {{Op::kEqualize, 0.4, -1}, {Op::kSolarize, 0.2, 4}},
    {{Op::kEqualize, 0.4, -1}, {Op::kRotate, 0.8, 8}},
    {{Op::kSolarize, 0.6, 3}, {Op::kEqualize, 0.6, -1}},
    {{Op::kPosterize, 0.8, 5}, {Op::kEqualize, 1.0, -1}},
    {{Op::kRotate, 0.2, 3}, {Op::kSolarize, 0.6, 8}},
    {{Op::kEqualize, 0.6, -1}, {Op::kPosterize, 0.4, 6}},
    {{Op::kRotate, 0.8, 8}, {Op::kColor, 0.4, 0}},
    {{Op::kRotate, 0.4, 9}, {Op::kEqualize, 0.6, -1}},
    {{Op::kEqualize, 0.0, -1}, {Op::kEqualize, 0.8, -1}},
    {{Op::kInvert, 0.6, -1}, {Op::kEqualize, 1.0, -1}},
    {{Op::kColor, 0.6, 4}, {Op::kContrast, 1.0, 8}},
    {{Op::kRotate, 0.8, 8}, {Op::kColor, 1.0, 2}},
    {{Op::kColor, 0.8, 8}, {Op::kSolarize, 0.8, 7}},
    {{Op::kSharpness, 0.4, 7}, {Op::kInvert, 0.6, -1}},
    {{Op::kShearX, 0.6, 5}, {Op::kEqualize, 1.0, -1}},
    {{Op::kColor, 0.4, 0}, {Op::kEqualize, 0.6, -1}},
    {{Op::kEqualize, 0.4, -1}, {Op::kSolarize, 0.2, 4}},
    {{Op::kSolarize, 0.6, 5}, {Op::kAutoContrast, 0.6, -1}},
    {{Op::kInvert, 0.6, -1}, {Op::kEqualize, 1.0, -1}},
    {{Op::kColor, 0.6, 4}, {Op::kContrast, 1.0, 8}},
    {{Op::kEqualize, 0.8, -1}, {Op::kEqualize, 0.6, -1}},
};
constexpr int kAutoAugmentBins = 10;  // AutoAugment.forward: self._augmentation_space(10, (height, width))

// torch.rand's float32 in [0, 1): 24 random bits.
float uniform_float(data::SampleRng& rng) { return static_cast<float>(rng.next() >> 40) * 0x1.0p-24f; }

}  // namespace

bool OpSpace::is_signed(Op op) {
  switch (op) {
    case Op::kShearX: case Op::kShearY: case Op::kTranslateX: case Op::kTranslateY: case Op::kRotate:
    case Op::kBrightness: case Op::kColor: case Op::kContrast: case Op::kSharpness:
      return true;
    default:
      return false;
  }
}

OpSpace::OpSpace(const PolicyOptions& policy, int width, int height) : policy_(policy) {
  const bool wide = policy.policy == Policy::kTrivialAugmentWide;
  bins_ = policy.policy == Policy::kAutoAugmentImageNet ? kAutoAugmentBins : kRandAugmentBins;
  // TrivialAugmentWide._augmentation_space; RandAugment's and AutoAugment's are the same but for their ranges.
  const int n = bins_;
  table_[static_cast<int>(Op::kShearX)] = table_[static_cast<int>(Op::kShearY)] = linspace(0.0, wide ? 0.99 : 0.3, n);
  table_[static_cast<int>(Op::kTranslateX)] = linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * width, n);
  table_[static_cast<int>(Op::kTranslateY)] = linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * height, n);
  table_[static_cast<int>(Op::kRotate)] = linspace(0.0, wide ? 135.0 : 30.0, n);
  for (Op op : {Op::kBrightness, Op::kColor, Op::kContrast, Op::kSharpness}) {
    table_[static_cast<int>(op)] = linspace(0.0, wide ? 0.99 : 0.9, n);
  }
  table_[static_cast<int>(Op::kPosterize)] = posterize_bits(n, wide ? 6.0 : 4.0);
  table_[static_cast<int>(Op::kSolarize)] = linspace(255.0, 0.0, n);
  if (policy.policy == Policy::kAutoAugmentImageNet) {
    ops_ = {Op::kShearX,     Op::kShearY,    Op::kTranslateX, Op::kTranslateY,   Op::kRotate,
            Op::kBrightness, Op::kColor,     Op::kContrast,   Op::kSharpness,    Op::kPosterize,
            Op::kSolarize,   Op::kAutoContrast, Op::kEqualize, Op::kInvert};
  } else if (policy.policy != Policy::kNone) {
    ops_ = {Op::kIdentity,   Op::kShearX,    Op::kShearY,     Op::kTranslateX,   Op::kTranslateY,
            Op::kRotate,     Op::kBrightness, Op::kColor,     Op::kContrast,     Op::kSharpness,
            Op::kPosterize,  Op::kSolarize,  Op::kAutoContrast, Op::kEqualize};
  }
}

double OpSpace::magnitude(Op op, int bin, bool negative) const {
  if (!has_magnitudes(op) || bin < 0) return 0.0;
  const double m = table_[static_cast<int>(op)].at(static_cast<size_t>(bin));
  return negative ? -m : m;
}

std::vector<OpDraw> OpSpace::draw(data::SampleRng& rng) const {
  std::vector<OpDraw> out;
  const auto make = [&](Op op, int bin, bool negative) {
    OpDraw d{op, has_magnitudes(op) ? bin : -1, negative && is_signed(op), 0.0};
    d.magnitude = magnitude(op, d.bin, d.negative);
    return d;
  };
  const int64_t n_ops = static_cast<int64_t>(ops_.size());
  switch (policy_.policy) {
    case Policy::kNone:
      break;
    case Policy::kTrivialAugmentWide: {  // one op, a random bin, a random sign
      const Op op = ops_[static_cast<size_t>(rng.below(n_ops))];
      const int bin = has_magnitudes(op) ? static_cast<int>(rng.below(bins_)) : -1;
      const bool negative = is_signed(op) && rng.below(2) == 1;
      out.push_back(make(op, bin, negative));
      break;
    }
    case Policy::kRandAugment:  // N ops, each at bin M, with a random sign
      for (int i = 0; i < policy_.rand_ops; ++i) {
        const Op op = ops_[static_cast<size_t>(rng.below(n_ops))];
        const bool negative = is_signed(op) && rng.below(2) == 1;
        out.push_back(make(op, policy_.rand_magnitude, negative));
      }
      break;
    case Policy::kAutoAugmentImageNet: {  // get_params: a sub-policy, two probabilities, two signs (0: negative)
      const SubOp* sub = kImageNet[rng.below(25)];
      const float probs[2] = {uniform_float(rng), uniform_float(rng)};
      const bool negative[2] = {rng.below(2) == 0, rng.below(2) == 0};
      for (int i = 0; i < 2; ++i) {
        if (probs[i] <= static_cast<float>(sub[i].p)) out.push_back(make(sub[i].op, sub[i].bin, negative[i]));
      }
      break;
    }
  }
  return out;
}

}  // namespace pinfeed::pipeline::augment

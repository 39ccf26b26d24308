// The three policies' op spaces and their per-image draws, on the host: torchvision's transforms/autoaugment.py
// (TrivialAugmentWide, RandAugment, AutoAugment with the ImageNet policy), its magnitude tables computed with the
// same float32 ATen ops, its draws made from a SampleRng instead of torch's global generator.
#pragma once

#include <vector>

#include "data/transform/sample_rng.h"
#include "pipeline/augment/options.h"
#include "pipeline/augment/pixel_ops.h"

namespace pinfeed::pipeline::augment {

// One op as an image gets it.
struct OpDraw {
  Op op = Op::kIdentity;
  int bin = -1;            // the magnitude's bin in the space's table; -1: the op takes none (magnitude 0)
  bool negative = false;   // a signed op's magnitude negated
  double magnitude = 0;    // as _apply_op receives it: the table's float32 value, signed
};

// A policy's space for images of one size: its ops in torchvision's order and each op's magnitudes.
class OpSpace {
 public:
  OpSpace(const PolicyOptions& policy, int width, int height);
  // The ops one image gets, in the order they apply: TrivialAugmentWide one (Identity included), RandAugment N,
  // AutoAugment's sub-policy's two, each kept with its probability (so 0 to 2).
  std::vector<OpDraw> draw(data::SampleRng& rng) const;
  // The magnitude of an op at a bin of this space's table (0 for an op without one), signed.
  double magnitude(Op op, int bin, bool negative) const;
  int bins() const { return bins_; }
  const std::vector<Op>& ops() const { return ops_; }
  bool has_magnitudes(Op op) const { return !table_[static_cast<int>(op)].empty(); }
  static bool is_signed(Op op);

 private:

  PolicyOptions policy_;
  int bins_;
  std::vector<Op> ops_;
  std::vector<float> table_[kOps];  // by op; empty: no magnitude
};

}  // namespace pinfeed::pipeline::augment

// A block's input going to two places, its first 1x1 convolution and the residual path, as one autograd node,
// so that the backward sums the two gradients of the input inside the convolution's data gradient.
//
// Why: autograd adds the gradients of a tensor used twice with a kernel of its own, a read of both and a write of
// the sum, at each of ResNet-50's 16 block inputs (docs/training-step.md#the-parts).
// The data gradient of a 1x1, stride-1 convolution on channels_last memory is one matrix product, and a GEMM with
// beta = 1 adds it to the residual path's gradient as it writes: one pass instead of three.
#pragma once

#include <torch/types.h>

namespace pinfeed::model {

struct ConvFork {
  torch::Tensor conv;   // the 1x1 convolution of x (no bias), in autocast's type where autocast is on
  torch::Tensor input;  // x itself, for the residual path: its gradient joins the convolution's in the backward
};

// x: (N, C, H, W), weight: (K, C, 1, 1). Under autocast, both are cast to autocast's type, as a convolution is.
// The sum is done in place in the residual path's gradient when that is a channels_last tensor no other tensor
// shares (true of every producer in ResNet's training step); else by a plain add.
ConvFork conv1x1_fork(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace pinfeed::model

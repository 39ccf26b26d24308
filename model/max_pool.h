// ResNet's stem max pool (3x3 window, stride 2, padding 1) in training, by pinfeed's own CUDA kernels
// (model/cuda/max_pool.cu): the forward keeps each window's argmax as a one-byte offset and the backward gathers,
// where ATen's NHWC max pool writes int64 indices and its backward scatters into a zero-filled gradient: a share
// of the step for almost no arithmetic (docs/training-step.md#the-parts). The same values and
// gradients as ATen's: the same argmax (ties to the first, NaN wins), sums in float32. model.max_pool = "auto"
// takes them on CUDA with channels_last.
// No CUDA types here: built without CUDA, stem_max_pool_unavailable_reason() says so and the call throws.
#pragma once

#include <torch/types.h>

#include <string>

namespace pinfeed::model {

// Empty when this build has the kernels (LibTorch with CUDA); else why not.
std::string stem_max_pool_unavailable_reason();

// x: (N, C, H, W) float32, fp16 or bf16 on CUDA (made channels_last if it is not) -> (N, C, H', W') channels_last,
// H' = (H - 1) / 2 + 1. Differentiable in x.
torch::Tensor stem_max_pool(const torch::Tensor& x);

}  // namespace pinfeed::model

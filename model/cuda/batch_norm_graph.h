// BN + ReLU (+ a residual added before the ReLU) through the cuDNN frontend's graph API: the other route of
// model/batch_norm.h's fused_batch_norm, which picks it (GraphBatchNorm). Built where the frontend's headers were
// found (batch_norm_graph.cpp), else a stub says why not.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace pinfeed::model::detail {

// Empty when this build has the graph route; else why not.
std::string graph_batch_norm_unavailable_reason();

// relu(bn(x) + residual) (residual defined) or relu(bn(x)), training mode: x and residual (N, C, H, W)
// channels_last bf16 or fp16 on CUDA, C a multiple of 8; weight, bias, running_mean, running_var (C,) float32,
// the last two updated in place (unbiased variance). Differentiable in x, residual, weight and bias.
// Where cuDNN cannot build the graphs for such a call (an older cuDNN: NVIDIA's bit-mask sample asks for 9.13; a
// shape no engine takes), an undefined tensor and cuDNN's reason in `why`: the caller can still take another route.
at::Tensor graph_batch_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                            double momentum, double eps, std::string& why);

}  // namespace pinfeed::model::detail

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

// relu(bn(conv(x, w)) + residual) in training mode, the 1x1 stride-1 convolution writing BN's statistics from its
// epilogue (cuDNN genstats, then BN finalize and one scale-bias-add-ReLU pass): x (N, C, H, W) and w (K, C, 1, 1)
// channels_last fp16 on CUDA, residual (N, K, H, W) channels_last fp16; weight, bias, running_mean, running_var
// (K,) float32 as graph_batch_norm's. Differentiable in x, w, residual, weight and bias. Where it cannot run (not
// fp16: cuDNN has no bf16 plan; no plan for the shape; deterministic kernels asked for), an undefined tensor and
// the reason in `why`.
at::Tensor graph_conv_bn_add_relu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& residual,
                                  const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                                  const at::Tensor& running_var, double momentum, double eps, std::string& why);

}  // namespace pinfeed::model::detail

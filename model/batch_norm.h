// BatchNorm in training mode fused with what follows it in a ResNet: BN, BN + ReLU, and BN + residual add +
// ReLU, forward and backward, one cuDNN kernel each way (channels_last CUDA tensors in bf16 or fp16). No CUDA
// types here: built without CUDA or cuDNN, fused_batch_norm_unavailable_reason() says so and the call throws.
//
// Why not ATen's batch_norm: ATen never picks cuDNN's BatchNorm for bf16 inputs, and BN, the residual add and ReLU
// each make their own passes over memory; cuDNN's NHWC BatchNorm (cudnnBatchNormalizationForwardTrainingEx /
// BackwardEx) does the three in one kernel, bf16 and fp16 alike (docs/training-step.md#the-parts).
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <string>

namespace pinfeed::model {

// Empty when the fused op can run in this build (LibTorch with CUDA, cuDNN found at build time); else why not.
std::string fused_batch_norm_unavailable_reason();

// Which BN + ReLU and BN + add + ReLU calls run through the cuDNN frontend's graph API instead of cuDNN's
// ...TrainingEx / ...BackwardEx calls (plain BN always takes the latter). Its forward is faster at every size,
// its backward only at 14x14 and smaller (ResNet-50's stages 3 and 4 at 224 px; docs/training-step.md).
enum class GraphBatchNorm {
  kNone,
  kSmall,  // H x W <= 14 x 14 ("auto" in bf16); where cuDNN cannot build the graphs, the ...Ex calls, warning once
  kAll,    // where cuDNN cannot build them, the call throws
  kConv,   // kSmall, and each block's conv3 + BN + add + ReLU through conv_bn_add_relu ("auto" in fp16)
};

// Whether fused_batch_norm sends a BN of C channels over an H x W map, with a ReLU after it or not, through the
// graph API under `graph`. Only BN + ReLU (+ add), the graphs it builds; channel counts that are multiples of 8,
// the only ones it was tested with (ResNet-50's are multiples of 64).
inline bool takes_graph(GraphBatchNorm graph, int64_t c, int64_t h, int64_t w, bool relu) {
  if (graph == GraphBatchNorm::kNone || !relu || c % 8 != 0) return false;
  return graph == GraphBatchNorm::kAll || h * w <= 14 * 14;
}

// "off", "small", "all" or "conv", the values of model.bn_graph it stands for: the bench's JSON records it.
inline const char* to_string(GraphBatchNorm g) {
  switch (g) {
    case GraphBatchNorm::kNone: return "off";
    case GraphBatchNorm::kSmall: return "small";
    case GraphBatchNorm::kAll: return "all";
    case GraphBatchNorm::kConv: return "conv";
  }
  return "?";
}

// Empty when this build has the graph API's route (the cuDNN frontend's headers found at build time).
std::string graph_batch_norm_unavailable_reason();

// relu(bn(x) + residual) with residual defined, relu(bn(x)) with relu, else bn(x): the batch's statistics
// normalise x, and bn's running_mean, running_var and num_batches_tracked are updated as BatchNorm2d's forward
// updates them (momentum bn.options.momentum(), unbiased running variance). x: (N, C, H, W) bf16 or fp16 on CUDA
// (made channels_last if it is not); residual: x's shape and dtype; bn's weight, bias and statistics float32.
// Differentiable in x, residual, weight and bias. A residual needs relu (cuDNN fuses only add + activation).
// graph: where the graph API's route runs instead (channel counts that are multiples of 8).
torch::Tensor fused_batch_norm(const torch::Tensor& x, const torch::Tensor& residual, torch::nn::BatchNorm2dImpl& bn,
                               bool relu, GraphBatchNorm graph = GraphBatchNorm::kNone);

// A bottleneck block's conv3, its BN, the block's shortcut and the ReLU in training mode: relu(bn(conv(x)) +
// residual), where the convolution (1x1, stride 1, no bias) writes BN's statistics from its epilogue and one pass
// applies BN's scale and bias, the shortcut and the ReLU (the cuDNN frontend's graph API; GraphBatchNorm::kConv).
// BN's statistics and its backward as fused_batch_norm's. x: (N, C, H, W) fp16 on CUDA; conv's weight float32
// (cast to fp16 here, through autocast's cache); residual (N, K, H, W) fp16. Where it cannot run (not fp16: cuDNN
// has no bf16 plan for it; a build without the frontend; no plan for the shape; deterministic kernels asked for),
// an undefined tensor and why not in `why`: the caller then runs conv and fused_batch_norm.
torch::Tensor conv_bn_add_relu(const torch::Tensor& x, torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn,
                               const torch::Tensor& residual, std::string& why);

}  // namespace pinfeed::model

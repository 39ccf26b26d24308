#include "model/resnet.h"

#include "model/batch_norm.h"
#include "model/conv_fork.h"
#include "model/max_pool.h"

#include <ATen/ops/constant_pad_nd.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/conv.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

namespace pinfeed::model {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// relu(bn(x) + residual), relu(bn(x)) or bn(x) (residual undefined, relu false): in training mode with fused on,
// one cuDNN op forward and one backward; else ATen's BN, add and ReLU, each a pass over memory.
torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                          bool relu, bool fused, GraphBatchNorm graph) {
  if (fused && bn.is_training()) return fused_batch_norm(x, residual, bn, relu, graph);
  torch::Tensor y = bn.forward(x);
  if (residual.defined()) y += residual;
  return relu ? F::relu(y, F::ReLUFuncOptions().inplace(true)) : y;
}

}  // namespace

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride, bool fused_bn, bool fold_grad_add,
                               GraphBatchNorm bn_graph, bool blurpool)
    : fused_bn_(fused_bn), fold_grad_add_(fold_grad_add), bn_graph_(bn_graph) {
  const int64_t out_planes = planes * kExpansion;
  conv1 = register_module("conv1", conv(in_planes, planes, 1, 1));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride));  // v1.5: stride here, not on conv1
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  conv3 = register_module("conv3", conv(planes, out_planes, 1, 1));
  bn3 = register_module("bn3", torch::nn::BatchNorm2d(out_planes));
  if (stride != 1 || in_planes != out_planes) {
    downsample = register_module(
        "downsample", torch::nn::Sequential(conv(in_planes, out_planes, 1, stride),
                                            torch::nn::BatchNorm2d(out_planes)));
  }
  // FFCV's rule: every Conv2d with a stride > 1 and >= 16 input channels (in ResNet-50 not the stem's 3).
  if (blurpool && stride > 1) {
    if (planes >= 16) blur_conv2_.emplace();
    if (downsample && in_planes >= 16) blur_downsample_.emplace();
  }
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  torch::Tensor out, identity = x;
  if (fold_grad_add_ && is_training()) {  // conv1 (1x1, stride 1) and the residual path share one backward node
    ConvFork fork = conv1x1_fork(x, conv1->weight);
    out = std::move(fork.conv);
    identity = std::move(fork.input);
  } else {
    out = conv1(x);
  }
  out = bn_add_relu(*bn1, out, {}, true, fused_bn_, bn_graph_);
  if (blur_conv2_) out = blur_conv2_->forward(out);
  out = bn_add_relu(*bn2, conv2(out), {}, true, fused_bn_, bn_graph_);
  if (downsample) {  // downsample.0 (conv) and downsample.1 (BN), called one by one so that the BN can be fused
    if (blur_downsample_) identity = blur_downsample_->forward(identity);
    identity = downsample[0]->as<torch::nn::Conv2d>()->forward(identity);
    identity = bn_add_relu(*downsample[1]->as<torch::nn::BatchNorm2d>(), identity, {}, false, fused_bn_, bn_graph_);
  }
  if (bn_graph_ == GraphBatchNorm::kConv && fused_bn_ && is_training()) {
    std::string why;
    torch::Tensor y = conv_bn_add_relu(out, *conv3, *bn3, identity, why);
    if (y.defined()) return y;
    TORCH_WARN_ONCE("model.bn_graph: conv3's BN statistics cannot come from the convolution here (", why,
                    "); conv3 and the fused BatchNorm run instead");
  }
  return bn_add_relu(*bn3, conv3(out), identity, true, fused_bn_, bn_graph_);
}

ResNetImpl::ResNetImpl(const int64_t (&layers)[4], const ResNetOptions& options)
    : fused_bn_(options.fused_bn), stem_max_pool_(options.stem_max_pool), fold_grad_add_(options.fold_grad_add),
      blurpool_(options.blurpool), bn_graph_(options.bn_graph) {
  conv1 = register_module("conv1", conv(3, 64, 7, 2));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
  layer1 = register_module("layer1", make_layer(64, layers[0], 1));
  layer2 = register_module("layer2", make_layer(128, layers[1], 2));
  layer3 = register_module("layer3", make_layer(256, layers[2], 2));
  layer4 = register_module("layer4", make_layer(512, layers[3], 2));
  fc = register_module("fc", torch::nn::Linear(512 * BottleneckImpl::kExpansion, options.num_classes));
  init_weights(options.zero_init_residual);
}

torch::nn::Sequential ResNetImpl::make_layer(int64_t planes, int64_t blocks, int64_t stride) {
  torch::nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    layer->push_back(
        Bottleneck(in_planes_, planes, i == 0 ? stride : 1, fused_bn_, fold_grad_add_, bn_graph_, blurpool_));
    in_planes_ = planes * BottleneckImpl::kExpansion;
  }
  return layer;
}

void ResNetImpl::init_weights(bool zero_init_residual) {
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
  if (zero_init_residual) {  // after the loop above, which would set these BN weights back to one
    for (auto& m : modules(false)) {
      if (auto* b = m->as<Bottleneck>()) torch::nn::init::zeros_(b->bn3->weight);
    }
  }
  // fc keeps torch's default Linear init (uniform +-1/sqrt(fan_in)), as torchvision does.
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = bn_add_relu(*bn1, stem_conv(x), {}, true, fused_bn_, bn_graph_);
  x = stem_max_pool_ && is_training() ? stem_max_pool(x)
                                      : F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
  return fc(x);
}

torch::Tensor ResNetImpl::stem_conv(const torch::Tensor& x) {
  if (x.size(1) != 4) return conv1(x);
  // RGB plus a zero channel (pipeline::FeederOptions::input_channels): the weight gets a zero input channel to
  // match, so the output is the 3-channel one and the gradient reaches conv1.weight (3 input channels) unchanged.
  const torch::Tensor w = at::constant_pad_nd(conv1->weight, {0, 0, 0, 0, 0, 1}).contiguous(x.suggest_memory_format());
  return F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).padding(3));
}

ResNet resnet50(const ResNetOptions& options) {
  const int64_t layers[4] = {3, 4, 6, 3};
  return ResNet(layers, options);
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace pinfeed::model

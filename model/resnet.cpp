#include "model/resnet.h"

#include "model/batch_norm.h"
#include "model/conv_fork.h"
#include "model/max_pool.h"

#include <ATen/ops/constant_pad_nd.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/conv.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <stdexcept>

namespace pinfeed::model {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups = 1) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).groups(groups).bias(false));
}

torch::nn::Sequential downsample_of(int64_t in_planes, int64_t out_planes, int64_t stride) {
  return torch::nn::Sequential(conv(in_planes, out_planes, 1, stride), torch::nn::BatchNorm2d(out_planes));
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

// The downsample path: downsample.0 (conv) and downsample.1 (BN) one by one, so that the BN can be fused.
torch::Tensor downsample_forward(torch::nn::Sequential& downsample, const torch::Tensor& x, bool fused,
                                 GraphBatchNorm graph) {
  const torch::Tensor y = downsample[0]->as<torch::nn::Conv2d>()->forward(x);
  return bn_add_relu(*downsample[1]->as<torch::nn::BatchNorm2d>(), y, {}, false, fused, graph);
}

}  // namespace

const std::vector<ArchSpec>& arch_specs() {
  static const std::vector<ArchSpec> specs = {
      {Arch::kResNet18, "resnet18", false, {2, 2, 2, 2}},
      {Arch::kResNet34, "resnet34", false, {3, 4, 6, 3}},
      {Arch::kResNet50, "resnet50", true, {3, 4, 6, 3}},
      {Arch::kResNet101, "resnet101", true, {3, 4, 23, 3}},
      {Arch::kResNet152, "resnet152", true, {3, 8, 36, 3}},
      {Arch::kWideResNet50_2, "wide_resnet50_2", true, {3, 4, 6, 3}, 1, 128},
      {Arch::kWideResNet101_2, "wide_resnet101_2", true, {3, 4, 23, 3}, 1, 128},
      {Arch::kResNeXt50_32x4d, "resnext50_32x4d", true, {3, 4, 6, 3}, 32, 4},
      {Arch::kResNeXt101_32x8d, "resnext101_32x8d", true, {3, 4, 23, 3}, 32, 8},
  };
  return specs;
}

const ArchSpec& spec_of(Arch arch) {
  for (const ArchSpec& s : arch_specs()) {
    if (s.arch == arch) return s;
  }
  throw std::invalid_argument("unknown ResNet architecture");
}

const ArchSpec& spec_of(const std::string& name) {
  for (const ArchSpec& s : arch_specs()) {
    if (name == s.name) return s;
  }
  throw std::invalid_argument("unknown ResNet architecture " + name);
}

int64_t parameter_count(const ArchSpec& spec, int64_t num_classes) {
  auto conv_bn = [](int64_t in, int64_t out, int64_t k, int64_t groups) { return in / groups * out * k * k + 2 * out; };
  int64_t n = conv_bn(3, 64, 7, 1), in = 64;
  const int64_t planes_of[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = planes_of[stage], out = planes * spec.expansion();
    for (int64_t b = 0; b < spec.layers[stage]; ++b) {
      if (spec.bottleneck) {
        const int64_t w = spec.width(planes);
        n += conv_bn(in, w, 1, 1) + conv_bn(w, w, 3, spec.groups) + conv_bn(w, out, 1, 1);
      } else {
        n += conv_bn(in, planes, 3, 1) + conv_bn(planes, planes, 3, 1);
      }
      if (b == 0 && (stage > 0 || in != out)) n += conv_bn(in, out, 1, 1);
      in = out;
    }
  }
  return n + in * num_classes + num_classes;
}

std::optional<Arch> arch_of_weights(const std::map<std::string, at::Tensor>& w) {
  int64_t layers[4] = {0, 0, 0, 0};
  for (int stage = 0; stage < 4; ++stage) {
    const std::string prefix = "layer" + std::to_string(stage + 1) + ".";
    while (w.count(prefix + std::to_string(layers[stage]) + ".conv1.weight")) ++layers[stage];
  }
  const bool bottleneck = w.count("layer1.0.conv3.weight") > 0;
  const auto conv2 = w.find("layer1.0.conv2.weight");
  if (conv2 == w.end() || conv2->second.dim() != 4) return std::nullopt;
  const int64_t width = conv2->second.size(0), groups = width / std::max<int64_t>(1, conv2->second.size(1));
  for (const ArchSpec& s : arch_specs()) {
    if (s.bottleneck == bottleneck && std::equal(layers, layers + 4, s.layers) &&
        (!bottleneck || (s.groups == groups && s.width(64) == width))) {
      return s.arch;
    }
  }
  return std::nullopt;
}

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride, bool fused_bn,
                               GraphBatchNorm bn_graph, bool blurpool)
    : fused_bn_(fused_bn), bn_graph_(bn_graph == GraphBatchNorm::kConv ? GraphBatchNorm::kSmall : bn_graph) {
  conv1 = register_module("conv1", conv(in_planes, planes, 3, stride));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  if (stride != 1 || in_planes != planes) downsample = register_module("downsample", downsample_of(in_planes, planes, stride));
  if (blurpool && stride > 1 && in_planes >= 16) blur_.emplace();  // FFCV's rule, as the Bottleneck's
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  const torch::Tensor in = blur_ ? blur_->forward(x) : x;
  torch::Tensor out = bn_add_relu(*bn1, conv1(in), {}, true, fused_bn_, bn_graph_);
  const torch::Tensor identity = downsample ? downsample_forward(downsample, in, fused_bn_, bn_graph_) : x;
  return bn_add_relu(*bn2, conv2(out), identity, true, fused_bn_, bn_graph_);
}

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride, bool fused_bn, bool fold_grad_add,
                               GraphBatchNorm bn_graph, bool blurpool, int64_t width, int64_t groups)
    : fused_bn_(fused_bn), fold_grad_add_(fold_grad_add), bn_graph_(bn_graph) {
  const int64_t out_planes = planes * kExpansion, w = width > 0 ? width : planes;
  conv1 = register_module("conv1", conv(in_planes, w, 1, 1));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(w));
  conv2 = register_module("conv2", conv(w, w, 3, stride, groups));  // v1.5: stride here, not on conv1
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(w));
  conv3 = register_module("conv3", conv(w, out_planes, 1, 1));
  bn3 = register_module("bn3", torch::nn::BatchNorm2d(out_planes));
  if (stride != 1 || in_planes != out_planes) {
    downsample = register_module("downsample", downsample_of(in_planes, out_planes, stride));
  }
  // FFCV's rule: every Conv2d with a stride > 1 and >= 16 input channels (in ResNet-50 not the stem's 3).
  if (blurpool && stride > 1) {
    if (w >= 16) blur_conv2_.emplace();
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
  if (downsample) {
    if (blur_downsample_) identity = blur_downsample_->forward(identity);
    identity = downsample_forward(downsample, identity, fused_bn_, bn_graph_);
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

ResNetImpl::ResNetImpl(const ResNetOptions& options)
    : fused_bn_(options.fused_bn), stem_max_pool_(options.stem_max_pool), fold_grad_add_(options.fold_grad_add),
      blurpool_(options.blurpool), bn_graph_(options.bn_graph), arch_(options.arch) {
  const ArchSpec& spec = spec_of(options.arch);
  conv1 = register_module("conv1", conv(3, 64, 7, 2));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
  layer1 = register_module("layer1", make_layer(spec, 64, spec.layers[0], 1));
  layer2 = register_module("layer2", make_layer(spec, 128, spec.layers[1], 2));
  layer3 = register_module("layer3", make_layer(spec, 256, spec.layers[2], 2));
  layer4 = register_module("layer4", make_layer(spec, 512, spec.layers[3], 2));
  fc = register_module("fc", torch::nn::Linear(512 * spec.expansion(), options.num_classes));
  init_weights(options.zero_init_residual);
}

torch::nn::Sequential ResNetImpl::make_layer(const ArchSpec& spec, int64_t planes, int64_t blocks, int64_t stride) {
  torch::nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    if (spec.bottleneck) {
      layer->push_back(Bottleneck(in_planes_, planes, s, fused_bn_, fold_grad_add_, bn_graph_, blurpool_,
                                  spec.width(planes), spec.groups));
    } else {
      layer->push_back(BasicBlock(in_planes_, planes, s, fused_bn_, bn_graph_, blurpool_));
    }
    in_planes_ = planes * spec.expansion();
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
      if (auto* b = m->as<BasicBlock>()) torch::nn::init::zeros_(b->bn2->weight);
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

ResNet resnet(const ResNetOptions& options) { return ResNet(options); }

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace pinfeed::model

#include <gtest/gtest.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>
#include <vector>

#include "model/conv_fork.h"
#include "model/resnet.h"

namespace pinfeed::model {
namespace {

TEST(ResNet50, HasTorchvisionParameterCountFor1000Classes) {
  EXPECT_EQ(count_parameters(*resnet({1000, false})), 25557032);
}

TEST(ResNet50, ParameterNamesMatchTorchvision) {
  auto m = resnet({10, false});
  const auto params = m->named_parameters();
  for (const char* name : {"conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight",
                           "layer1.0.downsample.0.weight", "layer1.0.downsample.1.weight", "layer2.3.bn3.bias",
                           "layer4.2.conv3.weight", "fc.weight", "fc.bias"}) {
    EXPECT_NE(params.find(name), nullptr) << name;
  }
  EXPECT_NE(m->named_buffers().find("layer3.5.bn2.running_mean"), nullptr);
  EXPECT_EQ(params.size(), 161u);
}

TEST(ResNet50, StrideSitsOnTheThreeByThreeConv) {  // torchvision v1.5
  auto m = resnet({10, false});
  auto* block = m->layer2[0]->as<BottleneckImpl>();
  EXPECT_EQ(block->conv1->options.stride()->at(0), 1);
  EXPECT_EQ(block->conv2->options.stride()->at(0), 2);
}

TEST(ResNet50, OutputShapeIsBatchByClasses) {
  auto m = resnet({7, false});
  m->eval();
  const auto y = m->forward(at::randn({2, 3, 64, 64}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 7}));
}

// What the feeder gives with model.pad_input: RGB and a zero fourth channel.
TEST(ResNet50, AZeroFourthChannelGivesTheThreeChannelOutputAndGradient) {
  auto m = resnet({5, false});
  const at::Tensor rgb = at::randn({2, 3, 32, 32}, at::kDouble);
  const at::Tensor padded = at::cat({rgb, at::zeros({2, 1, 32, 32}, at::kDouble)}, 1);
  m->to(at::kDouble);
  at::Tensor grads[2], outputs[2];
  for (int k = 0; k < 2; ++k) {
    m->zero_grad();
    outputs[k] = m->forward(k == 0 ? rgb : padded);
    outputs[k].sum().backward();
    grads[k] = m->conv1->weight.grad().clone();
  }
  EXPECT_EQ(grads[1].sizes(), (std::vector<int64_t>{64, 3, 7, 7}));
  // float64: only the order of the sums may differ (the CPU picks its convolution algorithm by shape).
  EXPECT_TRUE(at::allclose(outputs[1], outputs[0], 1e-9, 1e-9));
  EXPECT_TRUE(at::allclose(grads[1], grads[0], 1e-9, 1e-9)) << (grads[1] - grads[0]).abs().max().item<double>()
                                                            << " of " << grads[0].abs().max().item<double>();
}

// Equal up to summation order in float64: within 1e-9 of the largest magnitude.
bool same_up_to_order(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() <= 1e-9 * b.abs().max().item<double>() + 1e-12;
}

// model.fold_grad_add: each block input's two gradients summed inside conv1's data gradient. The same outputs,
// gradients and BN statistics as autograd's separate add, channels_last (the in-place GEMM) or not (the fallback).
TEST(ResNet50, FoldedGradientSumGivesTheSameGradients) {
  for (const bool channels_last : {true, false}) {
    ResNet models[2] = {resnet({6, false}), resnet({6, false, false, false, /*fold_grad_add=*/true})};
    for (auto& m : models) m->to(at::kDouble);
    {
      torch::NoGradGuard no_grad;
      const auto from = models[0]->named_parameters();
      for (auto& p : models[1]->named_parameters()) p.value().copy_(from[p.key()]);
    }
    at::Tensor x = at::randn({3, 3, 32, 32}, at::kDouble);
    if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor weights = at::randn({3, 6}, at::kDouble);
    at::Tensor outputs[2], input_grads[2];
    for (int k = 0; k < 2; ++k) {
      const at::Tensor xk = x.clone().requires_grad_(true);
      outputs[k] = models[k]->forward(xk);
      (outputs[k] * weights).sum().backward();
      input_grads[k] = xk.grad();
    }
    EXPECT_TRUE(same_up_to_order(outputs[1], outputs[0]));
    EXPECT_TRUE(same_up_to_order(input_grads[1], input_grads[0]));
    const auto reference = models[0]->named_parameters();
    for (const auto& p : models[1]->named_parameters()) {
      const at::Tensor& want = reference[p.key()].grad();
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_TRUE(same_up_to_order(p.value().grad(), want))
          << p.key() << (channels_last ? " channels_last: " : ": ")
          << (p.value().grad() - want).abs().max().item<double>() << " of " << want.abs().max().item<double>();
    }
    const auto stats = models[0]->named_buffers();
    for (const auto& b : models[1]->named_buffers()) {
      EXPECT_TRUE(same_up_to_order(b.value().to(at::kDouble), stats[b.key()].to(at::kDouble))) << b.key();
    }
  }
}

// model.bn_graph "small" (also under "conv", and "auto" in bf16): ResNet-50's stages 3 and 4 at 224 px (14x14,
// 7x7), not stages 1-2 or the stem.
TEST(GraphBatchNormRule, BnReluAt14x14AndSmallerUnderSmallEveryBnReluUnderAll) {
  EXPECT_TRUE(takes_graph(GraphBatchNorm::kSmall, 1024, 14, 14, true));
  EXPECT_TRUE(takes_graph(GraphBatchNorm::kSmall, 2048, 7, 7, true));
  EXPECT_TRUE(takes_graph(GraphBatchNorm::kSmall, 256, 10, 10, true));     // stage 3 at 160 px
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kSmall, 512, 28, 28, true));    // stage 2
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kSmall, 64, 112, 112, true));   // the stem
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kSmall, 1024, 14, 14, false));  // plain BN: the ...Ex call
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kSmall, 12, 7, 7, true));       // channels not a multiple of 8
  EXPECT_TRUE(takes_graph(GraphBatchNorm::kAll, 256, 56, 56, true));
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kAll, 256, 56, 56, false));
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kNone, 1024, 14, 14, true));
  // "conv": auto's routes for the BNs it leaves to fused_batch_norm (conv3's BN goes through conv_bn_add_relu).
  EXPECT_TRUE(takes_graph(GraphBatchNorm::kConv, 1024, 14, 14, true));
  EXPECT_FALSE(takes_graph(GraphBatchNorm::kConv, 512, 28, 28, true));
  EXPECT_STREQ(to_string(GraphBatchNorm::kConv), "conv");
  EXPECT_STREQ(to_string(GraphBatchNorm::kSmall), "small");
}

TEST(ConvFork, TheInputPassesThroughAndBothGradientsReachIt) {
  const at::Tensor x = at::randn({2, 4, 3, 3}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
  const at::Tensor w = at::randn({5, 4, 1, 1}, at::kDouble).requires_grad_(true);
  const ConvFork fork = conv1x1_fork(x, w);
  EXPECT_TRUE(at::equal(fork.input, x));
  EXPECT_EQ(fork.conv.sizes(), (std::vector<int64_t>{2, 5, 3, 3}));
  // The residual path's gradient arrives as a fresh tensor (as a BN's or a convolution's backward gives it).
  (fork.conv.sum() + (fork.input * 3).sum()).backward();
  const at::Tensor want = w.sum(0).view({1, 4, 1, 1}).expand_as(x) + 3;
  EXPECT_TRUE(at::allclose(x.grad(), want, 1e-12, 1e-12)) << x.grad() - want;
  EXPECT_TRUE(at::allclose(w.grad().view({5, 4}), x.sum({0, 2, 3}).unsqueeze(0).expand({5, 4}), 1e-12, 1e-12));
}

TEST(ResNet50, ZeroInitResidualZeroesEachBlocksLastBn) {
  auto m = resnet({10, true});
  EXPECT_EQ(m->layer1[0]->as<BottleneckImpl>()->bn3->weight.abs().sum().item<double>(), 0.0);
  EXPECT_GT(m->layer1[0]->as<BottleneckImpl>()->bn2->weight.abs().sum().item<double>(), 0.0);
}

TEST(ResNet, EveryArchHasItsParameterCountAndFindsItselfInItsWeights) {
  for (const ArchSpec& spec : arch_specs()) {
    SCOPED_TRACE(spec.name);
    ResNetOptions o{10, false};
    o.arch = spec.arch;
    ResNet m = resnet(o);
    EXPECT_EQ(count_parameters(*m), parameter_count(spec, 10));
    EXPECT_EQ(m->fc->weight.size(1), 512 * spec.expansion());
    std::map<std::string, at::Tensor> weights;
    for (const auto& p : m->named_parameters()) weights[p.key()] = p.value();
    EXPECT_EQ(arch_of_weights(weights), spec.arch);
    const at::NoGradGuard no_grad;
    m->eval();
    EXPECT_EQ(m->forward(at::randn({1, 3, 64, 64})).sizes(), (std::vector<int64_t>{1, 10}));
  }
  EXPECT_EQ(count_parameters(*resnet({1000, false, false, false, false, GraphBatchNorm::kNone, false, Arch::kResNet18})),
            11689512);  // torchvision's resnet18
}

}  // namespace
}  // namespace pinfeed::model

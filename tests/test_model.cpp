#include <gtest/gtest.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include "model/resnet.h"

namespace pinfeed::model {
namespace {

TEST(ResNet50, HasTorchvisionParameterCountFor1000Classes) {
  EXPECT_EQ(count_parameters(*resnet50({1000, false})), 25557032);
}

TEST(ResNet50, ParameterNamesMatchTorchvision) {
  auto m = resnet50({10, false});
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
  auto m = resnet50({10, false});
  auto* block = m->layer2[0]->as<BottleneckImpl>();
  EXPECT_EQ(block->conv1->options.stride()->at(0), 1);
  EXPECT_EQ(block->conv2->options.stride()->at(0), 2);
}

TEST(ResNet50, OutputShapeIsBatchByClasses) {
  auto m = resnet50({7, false});
  m->eval();
  const auto y = m->forward(at::randn({2, 3, 64, 64}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 7}));
}

// What the feeder gives with model.pad_input: RGB and a zero fourth channel.
TEST(ResNet50, AZeroFourthChannelGivesTheThreeChannelOutputAndGradient) {
  auto m = resnet50({5, false});
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

TEST(ResNet50, ZeroInitResidualZeroesEachBlocksLastBn) {
  auto m = resnet50({10, true});
  EXPECT_EQ(m->layer1[0]->as<BottleneckImpl>()->bn3->weight.abs().sum().item<double>(), 0.0);
  EXPECT_GT(m->layer1[0]->as<BottleneckImpl>()->bn2->weight.abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace pinfeed::model

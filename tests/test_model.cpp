#include <gtest/gtest.h>

#include <ATen/ops/randn.h>

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

TEST(ResNet50, ZeroInitResidualZeroesEachBlocksLastBn) {
  auto m = resnet50({10, true});
  EXPECT_EQ(m->layer1[0]->as<BottleneckImpl>()->bn3->weight.abs().sum().item<double>(), 0.0);
  EXPECT_GT(m->layer1[0]->as<BottleneckImpl>()->bn2->weight.abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace pinfeed::model

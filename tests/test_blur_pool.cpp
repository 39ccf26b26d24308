// model.blurpool on the CPU: the blur's values, the state dict it leaves alone, a training step through it. The
// whole model against torchvision's with FFCV's BlurPool: check_blur_pool.py; under the fast path: test_gpu_train.
#include <gtest/gtest.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/step/step_runner.h"
#include "model/blur_pool.h"
#include "model/resnet.h"

namespace pinfeed::model {
namespace {

// The blur by its definition, one output at a time: sum over the 3x3 window of [1 2 1]_i [1 2 1]_j / 16 x input,
// zero outside the image.
at::Tensor blur_by_hand(const at::Tensor& x) {
  const double taps[3] = {1, 2, 1};
  at::Tensor y = at::zeros(x.sizes(), x.options());
  auto in = x.accessor<double, 4>();
  auto out = y.accessor<double, 4>();
  for (int64_t n = 0; n < x.size(0); ++n)
    for (int64_t c = 0; c < x.size(1); ++c)
      for (int64_t h = 0; h < x.size(2); ++h)
        for (int64_t w = 0; w < x.size(3); ++w) {
          double s = 0;
          for (int i = -1; i <= 1; ++i)
            for (int j = -1; j <= 1; ++j) {
              if (h + i < 0 || h + i >= x.size(2) || w + j < 0 || w + j >= x.size(3)) continue;
              s += taps[i + 1] * taps[j + 1] / 16 * in[n][c][h + i][w + j];
            }
          out[n][c][h][w] = s;
        }
  return y;
}

TEST(BlurPool, IsTheBinomialFilterWithZeroPaddingPerChannel) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({2, 3, 5, 6}, at::kDouble);
  BlurPool blur;
  EXPECT_TRUE(at::allclose(blur.forward(x), blur_by_hand(x), 0, 1e-12));
  // channels_last input (the fast path's), then a new channel count: the filter is remade for each.
  const at::Tensor nhwc = x.contiguous(c10::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(at::allclose(blur.forward(nhwc), blur_by_hand(x), 0, 1e-12));
  const at::Tensor wide = at::randn({1, 16, 4, 4}, at::kDouble);
  EXPECT_TRUE(at::allclose(blur.forward(wide), blur_by_hand(wide), 0, 1e-12));
  // A constant image: 1 inside, 12/16 along an edge and 9/16 in a corner (the zero padding).
  const at::Tensor ones = at::ones({1, 1, 4, 4}, at::kFloat);
  const at::Tensor y = blur.forward(ones);
  EXPECT_FLOAT_EQ(y[0][0][1][2].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(y[0][0][0][2].item<float>(), 12.0f / 16);
  EXPECT_FLOAT_EQ(y[0][0][3][3].item<float>(), 9.0f / 16);
}

TEST(BlurPool, StateDictHasTheSameNamesAndShapesOnAndOff) {
  std::map<std::string, std::vector<int64_t>> state[2];
  for (const bool on : {false, true}) {
    ResNetOptions options{10, false};
    options.blurpool = on;
    ResNet m = resnet(options);
    m->eval();
    m->forward(at::randn({1, 3, 32, 32}));  // the filters exist now: still not in the state dict
    for (const auto& items : {m->named_parameters(), m->named_buffers()}) {
      for (const auto& item : items) state[on][item.key()] = item.value().sizes().vec();
    }
  }
  EXPECT_EQ(state[1], state[0]);
  EXPECT_EQ(state[1].size(), 161u + 3 * 53u);  // parameters, and each BN's three buffers
}

TEST(BlurPool, ATrainingStepRunsThroughItAndMovesTheWeights) {
  engine::StepOptions o;
  o.precision = engine::Precision::kFp32;
  o.net.blurpool = true;
  o.net.zero_init_residual = false;
  engine::StepRunner runner(o, 5);
  const at::Tensor before = runner.model()->layer2[0]->as<BottleneckImpl>()->conv2->weight.detach().clone();
  at::manual_seed(1);
  const at::Tensor images = at::randn({4, 3, 32, 32}), labels = at::randint(5, {4});
  for (int step = 0; step < 2; ++step) {
    const double loss = runner.train_step(images, labels, 0.1).item<double>();
    EXPECT_TRUE(std::isfinite(loss)) << "step " << step;
  }
  const at::Tensor after = runner.model()->layer2[0]->as<BottleneckImpl>()->conv2->weight;
  EXPECT_GT((after - before).abs().max().item<double>(), 0);  // its gradient came back through the blur
}

}  // namespace
}  // namespace pinfeed::model

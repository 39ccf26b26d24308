// GPU tests of the training step (ctest label "gpu"); skipped where no CUDA device is present.
#include <gtest/gtest.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include "app/step_runner.h"
#include "pipeline/gpu.h"

namespace pinfeed::app {
namespace {

Config config(bool graph, const std::string& precision) {
  return parse_config_string("[data]\nroot = \"/unused\"\n[train]\nlr = 0.05\nprecision = \"" + precision +
                                 "\"\nchannels_last = true\ncuda_graph = " + (graph ? "true" : "false") + "\n",
                             "gpu_train.toml");
}

TEST(GpuTrain, CudaGraphStepMatchesTheEagerStep) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  at::manual_seed(3);
  std::vector<at::Tensor> images, labels;
  for (int i = 0; i < 6; ++i) {
    images.push_back(at::randn({16, 3, 64, 64}, at::TensorOptions().device(cuda)).contiguous(c10::MemoryFormat::ChannelsLast));
    labels.push_back(at::randint(10, {16}, at::TensorOptions().device(cuda).dtype(at::kLong)));
  }
  for (const char* precision : {"fp32", "bf16"}) {
    StepRunner eager(resolve_plan(config(false, precision)), 10), graphed(resolve_plan(config(true, precision)), 10);
    for (int i = 0; i < 6; ++i) {
      const double a = eager.train_step(images[i], labels[i], 0.05).item<double>();
      const double b = graphed.train_step(images[i], labels[i], 0.05).item<double>();
      EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << precision << " step " << i;
    }
    EXPECT_TRUE(graphed.graphed());
  }
}

}  // namespace
}  // namespace pinfeed::app

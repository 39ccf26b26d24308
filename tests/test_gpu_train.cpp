// GPU tests of the training step (ctest label "gpu"); skipped where no CUDA device is present.
#include <gtest/gtest.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include "app/resume.h"
#include "app/step_runner.h"
#include "pipeline/gpu.h"

namespace pinfeed::app {
namespace {

Config config(bool graph, const std::string& precision) {
  return parse_config_string("[data]\nroot = \"/unused\"\n[train]\nlr = 0.05\nprecision = \"" + precision +
                                 "\"\nchannels_last = true\ncuda_graph = " + (graph ? "true" : "false") + "\n",
                             "gpu_train.toml");
}

// Six batches of 16 random 64 px images (channels_last) and labels of 10 classes, on cuda:0.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> random_batches(uint64_t seed) {
  const c10::Device cuda(c10::kCUDA, 0);
  at::manual_seed(seed);
  std::vector<at::Tensor> images, labels;
  for (int i = 0; i < 6; ++i) {
    images.push_back(at::randn({16, 3, 64, 64}, at::TensorOptions().device(cuda)).contiguous(c10::MemoryFormat::ChannelsLast));
    labels.push_back(at::randint(10, {16}, at::TensorOptions().device(cuda).dtype(at::kLong)));
  }
  return {images, labels};
}

TEST(GpuTrain, CudaGraphStepMatchesTheEagerStep) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(3);
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

// A resumed graphed run must go on from the restored momentum and BN statistics: capturing the graph (3 eager
// warm-up steps with lr 0, then the captured one) must neither clear the one nor move the other.
TEST(GpuTrain, CudaGraphResumeKeepsTheRestoredMomentumAndBatchNormStatistics) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(5);
  const Plan plan = resolve_plan(config(true, "fp32"));
  StepRunner whole(plan, 10);
  for (int i = 0; i < 6; ++i) whole.train_step(images[i], labels[i], 0.05);
  StepRunner first(plan, 10);
  for (int i = 0; i < 3; ++i) first.train_step(images[i], labels[i], 0.05);
  const Checkpoint ck = make_checkpoint(first, plan.config, 0, 3, 3, RunShape{1, 16, 96, 6});
  StepRunner resumed(plan, 10);
  restore_checkpoint(resumed, ck);
  for (int i = 3; i < 6; ++i) resumed.train_step(images[i], labels[i], 0.05);
  ASSERT_TRUE(resumed.graphed());
  const Checkpoint a = make_checkpoint(whole, plan.config, 0, 6, 6, RunShape{1, 16, 96, 6});
  const Checkpoint b = make_checkpoint(resumed, plan.config, 0, 6, 6, RunShape{1, 16, 96, 6});
  auto expect_close = [](const std::map<std::string, at::Tensor>& x, const std::map<std::string, at::Tensor>& y,
                         const char* what) {
    ASSERT_EQ(x.size(), y.size()) << what;
    for (const auto& [name, t] : x) {
      const at::Tensor u = y.at(name).to(t.scalar_type());
      // Graph and eager order reductions alike but cuDNN may pick other kernels: close, not equal. Clearing the
      // momentum or three extra BN updates move these by tens of percent.
      EXPECT_TRUE(at::allclose(t.to(at::kDouble), u.to(at::kDouble), 1e-2, 1e-4))
          << what << " " << name << " differs by " << (t.to(at::kDouble) - u.to(at::kDouble)).abs().max().item<double>();
    }
  };
  expect_close(a.model, b.model, "model");
  expect_close(a.optimizer, b.optimizer, "momentum");
}

}  // namespace
}  // namespace pinfeed::app

// The fp16 loss scaler (engine/optim/loss_scaler.h) and the optimizer's skip, on the CPU: ATen's amp kernels run there
// too, so the semantics are checked without a GPU; the GPU tests train with them.
#include <gtest/gtest.h>

#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/allclose.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"

namespace pinfeed::app {
namespace {

engine::LossScaler scaler(double init = 1024, int64_t growth_interval = 3) {
  engine::LossScalerOptions o;
  o.init_scale = init;
  o.growth_interval = growth_interval;
  return engine::LossScaler(c10::Device(c10::kCPU), o);
}

TEST(LossScaler, ScalesTheLossAndUnscalesTheGradients) {
  engine::LossScaler s = scaler(1024);
  EXPECT_FLOAT_EQ(s.scale(at::tensor(0.5)).item<float>(), 512.0f);
  std::vector<at::Tensor> grads = {at::full({4}, 2048.0), at::full({2, 2}, -1024.0)};
  s.unscale(grads);
  EXPECT_TRUE(grads[0].equal(at::full({4}, 2.0)));
  EXPECT_TRUE(grads[1].equal(at::full({2, 2}, -1.0)));
  EXPECT_EQ(s.found_inf().item<float>(), 0);
}

TEST(LossScaler, AnInfOrNanGradientBacksOffAndCountsASkippedStep) {
  for (const double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    engine::LossScaler s = scaler(1024);
    std::vector<at::Tensor> grads = {at::ones({3}), at::tensor({1.0, bad})};
    s.unscale(grads);
    EXPECT_EQ(s.found_inf().item<float>(), 1);
    s.update();
    EXPECT_EQ(s.current_scale(), 512);
    EXPECT_EQ(s.skipped_steps(), 1);
    // The next step is clean: found_inf is cleared, nothing more is skipped.
    std::vector<at::Tensor> clean = {at::ones({3})};
    s.unscale(clean);
    EXPECT_EQ(s.found_inf().item<float>(), 0);
    s.update();
    EXPECT_EQ(s.skipped_steps(), 1);
  }
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanStepsInARow) {
  engine::LossScaler s = scaler(1024, /*growth_interval=*/3);
  std::vector<at::Tensor> grads = {at::ones({2})};
  auto clean_step = [&] {
    s.unscale(grads);
    s.update();
  };
  clean_step();
  clean_step();
  EXPECT_EQ(s.current_scale(), 1024);
  clean_step();
  EXPECT_EQ(s.current_scale(), 2048);
  // An overflow resets the run of clean steps: three more are needed after it.
  std::vector<at::Tensor> bad = {at::tensor({std::numeric_limits<double>::infinity()})};
  clean_step();
  s.unscale(bad);
  s.update();
  EXPECT_EQ(s.current_scale(), 1024);
  clean_step();
  clean_step();
  EXPECT_EQ(s.current_scale(), 1024);
  clean_step();
  EXPECT_EQ(s.current_scale(), 2048);
}

TEST(LossScaler, StateRoundTripsAndResumesTheSameSchedule) {
  engine::LossScaler a = scaler(1024, 3);
  std::vector<at::Tensor> grads = {at::ones({2})};
  a.unscale(grads);
  a.update();
  a.unscale(grads);
  a.update();  // two clean steps of three
  std::map<std::string, at::Tensor> saved;
  for (const auto& [name, t] : a.state()) saved[name] = t.clone();
  engine::LossScaler b = scaler(65536, 3);
  b.load_state(saved);
  EXPECT_EQ(b.current_scale(), 1024);
  b.unscale(grads);
  b.update();  // the third clean step: grows, as it would have in a
  EXPECT_EQ(b.current_scale(), 2048);
}

TEST(LossScaler, RefusesAStateWithABadScaleOrMissingKeys) {
  engine::LossScaler s = scaler();
  auto state = [](double scale) {
    return std::map<std::string, at::Tensor>{{"scale", at::tensor(scale, at::kFloat)},
                                             {"growth_tracker", at::tensor(0, at::kInt)},
                                             {"skipped_steps", at::tensor(0.0, at::kDouble)}};
  };
  EXPECT_NO_THROW(s.load_state(state(8.0)));
  EXPECT_THROW(s.load_state(state(std::nan(""))), std::runtime_error);
  EXPECT_THROW(s.load_state(state(-1.0)), std::runtime_error);
  EXPECT_THROW(s.load_state(state(std::numeric_limits<double>::infinity())), std::runtime_error);
  auto partial = state(8.0);
  partial.erase("growth_tracker");
  EXPECT_THROW(s.load_state(partial), std::runtime_error);
}

TEST(Sgd, FoundInfSkipsTheWholeStepMomentumIncluded) {
  at::Tensor w = at::ones({3});
  w.mutable_grad() = at::full({3}, 0.5);
  engine::Sgd sgd({{"w", w}}, {}, engine::SgdOptions{0.9, false, 1e-4});
  sgd.step(0.1, at::ones({}));  // skipped
  EXPECT_TRUE(w.equal(at::ones({3})));
  EXPECT_TRUE(sgd.state().at("w").equal(at::zeros({3})));
  sgd.step(0.1, at::zeros({}));  // taken: as a first step would be (the buffer becomes the gradient)
  const double g = 0.5 + 1e-4 * 1.0;  // gradient + weight decay x weight
  EXPECT_TRUE(at::allclose(sgd.state().at("w"), at::full({3}, g)));
  EXPECT_TRUE(at::allclose(w, at::full({3}, 1 - 0.1 * g)));
}

}  // namespace
}  // namespace pinfeed::app

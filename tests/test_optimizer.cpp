// The optimizers behind one interface (SGD, LARS, LAMB) and the weight EMA on the CPU: what a captured CUDA
// graph and a resume rely on. Their steps against timm's and torch's definitions: check_optim_reference.py.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/optim/ema.h"
#include "engine/optim/optimizer.h"

namespace pinfeed::app {
namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

// A conv weight, BN's two parameters, an fc weight and bias: both groups of every optimizer.
Named fresh_params(uint64_t seed = 0) {
  at::manual_seed(seed);
  return {{"conv1.weight", at::randn({4, 3, 3, 3})}, {"bn1.weight", at::randn({4})}, {"bn1.bias", at::randn({4})},
          {"fc.weight", at::randn({3, 4})}, {"fc.bias", at::randn({3})}};
}

Named clone(const Named& named) {
  Named out;
  for (const auto& [n, t] : named) out.emplace_back(n, t.clone());
  return out;
}

engine::OptimizerOptions options_for(engine::OptimizerKind kind) {
  engine::OptimizerOptions o;
  o.kind = kind;
  o.sgd.weight_decay = 0.01;
  o.lars.eta = 0.02;
  return o;
}

// Gradients of step k, the same for every run.
void set_grads(Named& named, int k) {
  at::manual_seed(100 + k);
  for (auto& [n, p] : named) p.mutable_grad() = at::randn(p.sizes()) * (1 + k);
}

std::unique_ptr<engine::Optimizer> make(const Named& named, engine::OptimizerKind kind) {
  return engine::make_optimizer(named, engine::bn_and_bias_names(named), options_for(kind));
}

void steps(engine::Optimizer& o, Named& named, int from, int to) {
  for (int k = from; k < to; ++k) {
    o.zero_grad();
    set_grads(named, k);
    o.step(0.25 + 0.125 * k);
  }
}

void expect_equal(const Named& a, const Named& b, const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].second.equal(b[i].second)) << what << " " << a[i].first;
}

void expect_equal(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [n, t] : a) EXPECT_TRUE(t.equal(b.at(n))) << what << " " << n;
}

const engine::OptimizerKind kKinds[] = {engine::OptimizerKind::kSgd, engine::OptimizerKind::kLars, engine::OptimizerKind::kLamb};

TEST(Optimizer, EachNameOfTheRegistryMakesItsOptimizer) {
  std::vector<std::string> names;
  for (const auto& [name, kind] : engine::optimizer_names()) {
    names.push_back(name);
    EXPECT_EQ(name_of(kind), name);
    Named p = fresh_params();
    EXPECT_NE(make(p, kind), nullptr);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"sgd", "lars", "lamb"}));
  EXPECT_EQ(engine::bn_and_bias_names(fresh_params()), (std::vector<std::string>{"bn1.weight", "bn1.bias", "fc.bias"}));
}

// A captured graph reads the rate from a device scalar: the same bytes as the number's step.
TEST(Optimizer, ARateFromATensorStepsAsTheNumberDoes) {
  for (const engine::OptimizerKind kind : kKinds) {
    Named a = fresh_params(), b = clone(a);
    auto oa = make(a, kind), ob = make(b, kind);
    for (int k = 0; k < 3; ++k) {
      set_grads(a, k);
      set_grads(b, k);
      oa->step(0.375);
      ob->step(at::full({}, 0.375, at::kFloat));
    }
    expect_equal(a, b, name_of(kind));
    expect_equal(oa->state(), ob->state(), name_of(kind));
  }
}

// The fp16 loss scaler's overflow: infinite gradients, found_inf 1. Nothing moves, the step count included.
TEST(Optimizer, FoundInfSkipsTheWholeStepStateIncluded) {
  for (const engine::OptimizerKind kind : kKinds) {
    Named p = fresh_params();
    auto o = make(p, kind);
    steps(*o, p, 0, 2);
    const Named before = clone(p);
    std::map<std::string, at::Tensor> state;
    for (const auto& [n, t] : o->state()) state[n] = t.clone();
    o->zero_grad();
    set_grads(p, 2);
    p[3].second.mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
    o->step(0.5, at::ones({}));
    expect_equal(p, before, std::string(name_of(kind)) + " weights");
    expect_equal(o->state(), state, std::string(name_of(kind)) + " state");
  }
}

// A checkpoint's state, loaded into a new optimizer over the same weights, goes on bit for bit.
TEST(Optimizer, StateLoadedIntoANewOptimizerContinuesBitForBit) {
  for (const engine::OptimizerKind kind : kKinds) {
    Named whole = fresh_params(), split = clone(whole);
    auto ow = make(whole, kind);
    steps(*ow, whole, 0, 4);
    auto first = make(split, kind);
    steps(*first, split, 0, 2);
    std::map<std::string, at::Tensor> saved;
    for (const auto& [n, t] : first->state()) saved[n] = t.clone();
    Named resumed = clone(split);
    auto second = make(resumed, kind);
    EXPECT_TRUE(second->state().empty()) << "before its first step";
    second->load_state(saved);
    steps(*second, resumed, 2, 4);
    expect_equal(whole, resumed, name_of(kind));
    expect_equal(ow->state(), second->state(), name_of(kind));
    EXPECT_EQ(second->zero_state().size(), saved.size());
  }
}

// What a graph's capture does when the run had no state yet: the warm-up's state reset, the next step a first one.
TEST(Optimizer, ResetStateStepsAsAFreshOptimizer) {
  for (const engine::OptimizerKind kind : kKinds) {
    Named fresh = fresh_params(), reset = clone(fresh);
    auto of = make(fresh, kind), orr = make(reset, kind);
    steps(*orr, reset, 0, 2);
    for (size_t i = 0; i < reset.size(); ++i) reset[i].second.copy_(fresh[i].second);  // the weights as they were
    orr->reset_state();
    steps(*of, fresh, 5, 6);
    steps(*orr, reset, 5, 6);
    expect_equal(fresh, reset, name_of(kind));
  }
}

// A parameter without a gradient is left alone; the others step.
TEST(Optimizer, AParameterWithoutAGradientIsLeftAlone) {
  for (const engine::OptimizerKind kind : kKinds) {
    Named p = fresh_params();
    auto o = make(p, kind);
    set_grads(p, 0);
    p[1].second.mutable_grad().reset();
    const at::Tensor bn = p[1].second.clone(), conv = p[0].second.clone();
    o->step(0.5);
    EXPECT_TRUE(p[1].second.equal(bn)) << name_of(kind);
    EXPECT_FALSE(p[0].second.equal(conv)) << name_of(kind);
  }
}

// ModelEmaV3.get_decay(step): 0 for the first update, then the decay, or with warm-up
// 1 - (1 + (n - 1) / gamma)^-power within [min_decay, decay].
TEST(WeightEma, DecayFollowsModelEmaV3) {
  engine::EmaOptions o;
  o.decay = 0.9998;
  EXPECT_EQ(engine::ema_decay(o, 0), 0.0);
  EXPECT_EQ(engine::ema_decay(o, 1), 0.0);
  EXPECT_EQ(engine::ema_decay(o, 2), 0.9998);
  EXPECT_EQ(engine::ema_decay(o, 1000000), 0.9998);
  o.warmup = true;
  EXPECT_EQ(engine::ema_decay(o, 1), 0.0);
  EXPECT_NEAR(engine::ema_decay(o, 2), 1 - std::pow(2.0, -2.0 / 3), 1e-15);
  EXPECT_NEAR(engine::ema_decay(o, 1001), 1 - std::pow(1001.0, -2.0 / 3), 1e-15);
  EXPECT_EQ(engine::ema_decay(o, 1e9), 0.9998);  // capped by the decay
  o.min_decay = 0.5, o.warmup_gamma = 4, o.warmup_power = 1;
  EXPECT_EQ(engine::ema_decay(o, 2), 0.5);                  // 1 - 1 / 1.25 = 0.2, raised to min_decay
  EXPECT_NEAR(engine::ema_decay(o, 13), 1 - 1 / 4.0, 1e-15);  // 1 - (1 + 12 / 4)^-1
}

// The first update copies the model exactly (decay 0); the next average floating tensors and copy the rest.
TEST(WeightEma, FirstUpdateCopiesTheModelThenAveragesFloatsAndCopiesTheRest) {
  Named model = {{"w", at::full({3}, 2.0f)}, {"count", at::full({}, 5, at::kLong)}};
  Named ema = {{"w", at::zeros({3})}, {"count", at::zeros({}, at::kLong)}};
  engine::EmaOptions o;
  o.decay = 0.75;
  engine::WeightEma e(ema, model, o);
  EXPECT_TRUE(ema[0].second.equal(model[0].second)) << "starts as a copy";
  model[0].second.fill_(3.0f);
  e.advance();
  e.apply();
  EXPECT_TRUE(ema[0].second.equal(at::full({3}, 3.0f)));
  EXPECT_EQ(e.updates(), 1);
  model[0].second.fill_(7.0f);
  model[1].second.fill_(9);
  e.advance();
  e.apply();
  EXPECT_TRUE(ema[0].second.equal(at::full({3}, 4.0f))) << "7 + 0.75 x (3 - 7)";
  EXPECT_EQ(ema[1].second.item<int64_t>(), 9);
  EXPECT_EQ(e.last_decay(), 0.75);
  EXPECT_EQ(e.state().size(), 2u);
  EXPECT_TRUE(e.state().at("w").is_same(ema[0].second)) << "the tensors themselves";
}

// What StepRunner::capture does to the EMA on a graphed run's first step at a new side, after advance(): the
// warm-up and captured runs apply it (lr 0, the weights unchanged), the EMA's tensors are put back, and the
// replay applies it with the decay advance() set. The sequence, at the first update and at a later one, ends as
// the one without a capture, bit for bit, and the count of updates is the steps'.
TEST(WeightEma, ASimulatedCaptureLeavesTheSequenceAsWithout) {
  for (const int capture_at : {1, 3}) {
    Named model = {{"w", at::full({3}, 2.0f)}, {"count", at::full({}, 5, at::kLong)}};
    Named plain = {{"w", at::zeros({3})}, {"count", at::zeros({}, at::kLong)}}, graphed = clone(plain);
    engine::EmaOptions o;
    o.decay = 0.5;
    engine::WeightEma p(plain, model, o), g(graphed, model, o);
    for (int step = 1; step <= 5; ++step) {
      p.advance();
      g.advance();
      if (step == capture_at) {
        std::vector<at::Tensor> tensors = g.tensors(), saved;
        tensors.push_back(model[1].second);  // BN's count moves in the warm-up too, and is put back
        for (const auto& t : tensors) saved.push_back(t.clone());
        for (int run = 0; run < 4; ++run) {  // 3 warm-up runs and the captured one: lr 0, the weights stay
          model[1].second.add_(1);
          g.apply();
        }
        for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(saved[i]);
      }
      model[0].second.add_(static_cast<float>(step));  // the optimizer's step (in the replay)
      model[1].second.add_(1);
      p.apply();
      g.apply();
      EXPECT_TRUE(graphed[0].second.equal(plain[0].second)) << "capture at " << capture_at << ", step " << step;
      EXPECT_TRUE(graphed[1].second.equal(plain[1].second)) << "capture at " << capture_at << ", step " << step;
    }
    EXPECT_EQ(g.updates(), 5);
    EXPECT_EQ(g.last_decay(), 0.5);
  }
}

}  // namespace
}  // namespace pinfeed::app

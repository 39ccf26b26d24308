// The step's gradient paths on the CPU, eager (engine/step/step_runner.h): accumulation (train.accumulate_steps),
// and the gradients all-reduced through a group of one rank (dist.one_rank_group).
#include <gtest/gtest.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/dist/distributed.h"
#include "engine/step/step_runner.h"
#include "runner_distance.h"

namespace pinfeed::engine {
namespace {

// ResNet-18 in fp32 with SGD's momentum and weight decay; the same seed gives every runner the same weights.
StepOptions options(int64_t accumulate) {
  StepOptions o;
  o.precision = Precision::kFp32;
  o.net.arch = model::Arch::kResNet18;
  o.net.zero_init_residual = false;
  o.seed = 3;
  o.accumulate_steps = accumulate;
  return o;
}

// Low enough that the un-normalised network (BN in eval mode below) trains smoothly rather than chaotically, where
// rounding alone would part two runs.
constexpr double kLr = 1e-3;

std::pair<at::Tensor, at::Tensor> batch(int step, int64_t n) {
  at::manual_seed(100 + step);
  return {at::randn({n, 3, 32, 32}), at::randint(10, {n}, at::TensorOptions().dtype(at::kLong))};
}

// BN from its running statistics (eval mode): a batch's gradient is then exactly the mean of its halves'
// gradients, which is what accumulation must reproduce (in training mode each micro-batch normalises by its own
// statistics, as it would on a GPU that only fits the micro-batch).
TEST(Accumulate, TwoMicroBatchesStepAsOneBatchOfBoth) {
  StepRunner whole(options(1), 10), parts(options(2), 10), start(options(1), 10);
  whole.model()->eval();
  parts.model()->eval();
  for (int step = 0; step < 3; ++step) {
    const auto [x, y] = batch(step, 8);
    whole.train_step(x, y, kLr);
    parts.train_step(x.narrow(0, 0, 4), y.narrow(0, 0, 4), kLr);
    EXPECT_EQ(parts.pending_micro_steps(), 1);
    parts.train_step(x.narrow(0, 4, 4), y.narrow(0, 4, 4), kLr);
    EXPECT_EQ(parts.pending_micro_steps(), 0);
  }
  EXPECT_LT(relative_distance(whole, parts), 1e-5);
  EXPECT_GT(relative_distance(whole, start), 100 * relative_distance(whole, parts)) << "the weights did not move: the comparison would prove nothing";
  ASSERT_EQ(whole.optimizer().state().size(), parts.optimizer().state().size());
  for (const auto& [name, m] : whole.optimizer().state()) {
    const at::Tensor& n = parts.optimizer().state().at(name);
    EXPECT_LE((m - n).norm().item<double>(), 1e-5 * (m.norm().item<double>() + 1e-12)) << "momentum of " << name;
  }
}

// An epoch whose batches end inside an accumulation: finish_accumulation steps on the mean of those taken, as
// one batch of them would.
TEST(Accumulate, AnEpochEndingInsideAnAccumulationStepsOnTheMicroBatchesTaken) {
  StepRunner whole(options(1), 10), parts(options(3), 10);
  whole.model()->eval();
  parts.model()->eval();
  const auto [x, y] = batch(0, 8);
  whole.train_step(x, y, kLr);
  parts.train_step(x.narrow(0, 0, 4), y.narrow(0, 0, 4), kLr);
  parts.train_step(x.narrow(0, 4, 4), y.narrow(0, 4, 4), kLr);
  EXPECT_EQ(parts.pending_micro_steps(), 2);
  parts.finish_accumulation(kLr);
  EXPECT_EQ(parts.pending_micro_steps(), 0);
  parts.finish_accumulation(kLr);  // nothing taken: no step
  EXPECT_LT(relative_distance(whole, parts), 1e-5);
}

// dist.one_rank_group: a 1-rank Gloo group's all-reduce (the multi-rank step's hooks and buckets) averages over
// one rank, so the step through it is the step without it, accumulating or not, with the weights and their
// gradients in channels_last or not (the buckets hold each gradient in its own order); the group's other
// collectives are this rank's own values.
TEST(Accumulate, AStepThroughAOneRankGroupIsTheStepWithoutOne) {
  Distributed group(DistEnv{}, c10::Device(c10::kCPU), "gloo", std::chrono::seconds(20), /*one_rank_group=*/true);
  ASSERT_TRUE(group.grouped());
  EXPECT_FALSE(group.active());
  EXPECT_TRUE(group.any(true));
  EXPECT_EQ(group.all_gather({1.5}), std::vector<double>{1.5});
  for (const auto& [accumulate, channels_last] : {std::pair<int64_t, bool>{1, false}, {2, false}, {1, true}}) {
    StepOptions o = options(accumulate);
    o.channels_last = channels_last;
    StepRunner alone(o, 10), grouped(o, 10, &group), start(o, 10);
    for (int step = 0; step < 4; ++step) {
      auto [x, y] = batch(step, 4);
      if (channels_last) x = x.contiguous(c10::MemoryFormat::ChannelsLast);
      alone.train_step(x, y, kLr);
      grouped.train_step(x, y, kLr);
    }
    SCOPED_TRACE("accumulate " + std::to_string(accumulate) + (channels_last ? ", channels_last" : ""));
    EXPECT_LT(relative_distance(alone, grouped), 1e-6);
    // The optimizer read the averages in the buckets: each gradient is a view of one, laid out as its weight.
    std::set<const void*> storages;
    for (const auto& p : grouped.model()->parameters()) {
      storages.insert(p.grad().storage().data());
      EXPECT_TRUE(p.grad().is_contiguous(p.suggest_memory_format()));
    }
    EXPECT_LE(storages.size(), 3u) << "resnet18's 45 MiB of gradients, in buckets of about 25 MiB";
    EXPECT_GT(relative_distance(alone, start), 1e-4) << "the weights did not move: the comparison would prove nothing";
  }
}

}  // namespace
}  // namespace pinfeed::engine

// GPU tests of the training step (ctest label "gpu"); skipped where no CUDA device is present.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "app/plan/datasets.h"
#include "engine/dist/distributed.h"
#include "engine/step/autocast.h"
#include "engine/step/step_runner.h"
#include "app/train/resume.h"
#include "pipeline/transfer/feeder.h"
#include "gpu/gpu.h"
#include "model/resnet.h"
#include "pipeline/decode/jpeg_decoder.h"
#include "runner_distance.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

// channels_last: model.fused_bn "auto" fuses BN in bf16 and fp16. extra: more [train] lines, or a [model] section.
// Batches of 16: the graph is captured for full batches only.
Config config(bool graph, const std::string& precision, const std::string& extra = "") {
  return parse_config_string("[data]\nroot = \"/unused\"\n[train]\nbatch_size = 16\nlr = 0.05\nprecision = \"" + precision +
                                 "\"\nchannels_last = true\ncuda_graph = " + (graph ? "true" : "false") + "\n" + extra,
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

TEST(GpuTrain, ANewUsersConfigTakesTheFastPathOnCuda) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const Config minimal = parse_config_string("[data]\nroot = \"/unused\"\n", "minimal.toml");
  const Plan p = resolve_plan(minimal);
  EXPECT_TRUE(p.step.channels_last);
  EXPECT_TRUE(p.step.cuda_graph);
  EXPECT_EQ(p.transform.gpu_decode, pipeline::JpegDecoder::unavailable_reason().empty());
  EXPECT_EQ(pipeline::mode_name(p.pipeline), "dual_stream");
  EXPECT_EQ(parse_config_string(to_toml(p), "again.toml").train.cuda_graph, std::nullopt);  // still "auto"
  engine::DistEnv two_ranks;
  two_ranks.world = two_ranks.local_world = 2;
  EXPECT_TRUE(resolve_plan(minimal, two_ranks).step.cuda_graph);  // the all-reduce inside the graph
}

TEST(GpuTrain, CudaGraphStepMatchesTheEagerStep) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(3);
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    engine::StepRunner eager(resolve_plan(config(false, precision)).step, 10),
        graphed(resolve_plan(config(true, precision)).step, 10);
    for (int i = 0; i < 6; ++i) {
      const double a = eager.train_step(images[i], labels[i], 0.05).item<double>();
      const double b = graphed.train_step(images[i], labels[i], 0.05).item<double>();
      EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << precision << " step " << i;
    }
    EXPECT_TRUE(graphed.graphed());
    EXPECT_EQ(graphed.graphs(), 1) << precision;
  }
}

// train.accumulate_steps 3 under the graph (a micro-batch graph and the optimizer step's graph, one memory pool):
// every micro-batch's loss as the eager accumulation's, fp16 with loss scaling, and the optimizer steps on the
// third; a seventh micro-batch left at the end is stepped on by finish_accumulation in both.
TEST(GpuTrain, AccumulationUnderTheGraphStepsAsEagerAccumulation) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(5);
  const std::string accumulate = "accumulate_steps = 3\n";
  engine::StepRunner eager(resolve_plan(config(false, "fp16", accumulate)).step, 10),
      graphed(resolve_plan(config(true, "fp16", accumulate)).step, 10);
  for (int i = 0; i < 7; ++i) {
    const double a = eager.train_step(images[i % 6], labels[i % 6], 0.05).item<double>();
    const double b = graphed.train_step(images[i % 6], labels[i % 6], 0.05).item<double>();
    EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << "micro-batch " << i;
    EXPECT_EQ(eager.pending_micro_steps(), graphed.pending_micro_steps());
  }
  eager.finish_accumulation(0.05);
  graphed.finish_accumulation(0.05);
  const double a = eager.train_step(images[0], labels[0], 0.05).item<double>();
  const double b = graphed.train_step(images[0], labels[0], 0.05).item<double>();
  EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << "after finish_accumulation";
  EXPECT_TRUE(graphed.graphed());
  EXPECT_EQ(graphed.graphs(), 1);
  // The weights moved by three optimizer steps, alike: their distance relative to their norm, over all of them
  // (one small tensor, a BN shift near zero, can differ by more in fp16 alone, so the largest is printed too).
  std::cout << "eager / graphed accumulation, relative weight distance: " << relative_distance(eager, graphed)
            << ", largest of one tensor: " << largest_relative_difference(eager, graphed) << "\n";
  EXPECT_LT(relative_distance(eager, graphed), 2e-2);
}

// The gradient all-reduce inside the captured step, on one GPU: the trainer's step with dist.one_rank_group, its
// gradients all-reduced through a 1-rank NCCL group (GradSync's hooks launching each bucket's all-reduce during
// the captured backward), fp16, accumulating over 2 micro-batches. Graphed, it steps as the same step eager
// (the graph test's tolerance) and as the graphed step with no group (an average over one rank changes nothing:
// what is proved is that the collectives capture and replay, bucket copies included).
TEST(GpuTrain, AGradientAllReduceIsCapturedInTheGraphAndStepsAsEagerAndAsNoGroup) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(11);
  const std::string accumulate = "accumulate_steps = 2\n";
  const Plan graphed = resolve_plan(config(true, "fp16", accumulate)), eager = resolve_plan(config(false, "fp16", accumulate));
  engine::Distributed group(engine::DistEnv{}, graphed.device, "nccl", std::chrono::seconds(60), /*one_rank_group=*/true);
  ASSERT_TRUE(group.grouped());
  ASSERT_FALSE(group.active());
  engine::StepRunner alone(graphed.step, 10), grouped(graphed.step, 10, &group), grouped_eager(eager.step, 10, &group);
  for (int i = 0; i < 6; ++i) {
    const double a = alone.train_step(images[i], labels[i], 0.05).item<double>();
    const double b = grouped.train_step(images[i], labels[i], 0.05).item<double>();
    const double c = grouped_eager.train_step(images[i], labels[i], 0.05).item<double>();
    EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << "micro-batch " << i << ", graphed: no group / 1-rank group";
    EXPECT_NEAR(c, b, 2e-2 * std::abs(c)) << "micro-batch " << i << ", 1-rank group: eager / graphed";
  }
  EXPECT_TRUE(grouped.graphed());
  EXPECT_EQ(grouped.graphs(), 1);
  std::cout << "relative weight distance, graphed no group / graphed 1-rank NCCL group: " << relative_distance(alone, grouped)
            << " (largest of one tensor " << largest_relative_difference(alone, grouped) << "); eager / graphed, "
            << "both through the group: " << relative_distance(grouped_eager, grouped) << " (largest of one tensor "
            << largest_relative_difference(grouped_eager, grouped) << ")\n";
  EXPECT_LT(relative_distance(alone, grouped), 2e-2);
  EXPECT_LT(relative_distance(grouped_eager, grouped), 2e-2);
}

// LARS and LAMB, and the EMA of the weights, in the captured step: each step's loss as the eager step's, and the
// EMA, in both runners, the EMA of that runner's own weights after each of its steps (decay 0 for the first, then
// 0.5, so that every step's weights count). Not the eager EMA against the graphed one: at lr 0.05 the two runs'
// weights part by rounding alone (other kernels, autotuned apart), so their EMAs part too; the weights' relative
// distance is printed for that.
TEST(GpuTrain, CudaGraphStepWithLarsLambAndEmaMatchesTheEagerStep) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(7);
  // The model's parameters and buffers by name, as the EMA names them.
  auto weights = [](engine::StepRunner& r) {
    std::map<std::string, at::Tensor> out;
    for (const auto& items : {r.model()->named_parameters(), r.model()->named_buffers()}) {
      for (const auto& item : items) {
        const at::Tensor t = item.value().detach();
        out[item.key()] = t.is_floating_point() ? t.to(at::kDouble) : t.clone();
      }
    }
    return out;
  };
  // ModelEmaV3 in double from the weights after each step: the first update a copy, then decay 0.5.
  auto fold = [](std::map<std::string, at::Tensor>& ema, const std::map<std::string, at::Tensor>& w) {
    for (const auto& [name, t] : w) {
      ema[name] = ema.count(name) && t.is_floating_point() ? 0.5 * ema[name] + 0.5 * t : t;
    }
  };
  auto expect_ema = [](const std::map<std::string, at::Tensor>& want, engine::StepRunner& r, const char* which) {
    const auto got = r.ema()->state();
    ASSERT_EQ(got.size(), want.size()) << which;
    for (const auto& [name, t] : want) {
      if (!t.is_floating_point()) {
        EXPECT_TRUE(got.at(name).equal(t)) << which << " EMA " << name;
        continue;
      }
      EXPECT_LE((got.at(name).to(at::kDouble) - t).norm().item<double>(), 1e-5 * t.norm().item<double>() + 1e-9)
          << which << " EMA " << name;
    }
  };
  for (const char* optimizer : {"sgd", "lars", "lamb"}) {
    for (const char* precision : {"bf16", "fp16"}) {
      SCOPED_TRACE(std::string(optimizer) + " " + precision);
      const std::string extra = std::string("optimizer = \"") + optimizer + "\"\nema = true\nema_decay = 0.5\n";
      engine::StepRunner eager(resolve_plan(config(false, precision, extra)).step, 10),
          graphed(resolve_plan(config(true, precision, extra)).step, 10);
      std::map<std::string, at::Tensor> eager_ema, graphed_ema;
      for (int i = 0; i < 6; ++i) {
        const double a = eager.train_step(images[i], labels[i], 0.05).item<double>();
        const double b = graphed.train_step(images[i], labels[i], 0.05).item<double>();
        EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << "step " << i;
        fold(eager_ema, weights(eager));
        fold(graphed_ema, weights(graphed));
      }
      EXPECT_EQ(graphed.graphs(), 1);
      ASSERT_NE(graphed.ema(), nullptr);
      EXPECT_EQ(graphed.ema()->updates(), 6);
      expect_ema(eager_ema, eager, "eager");
      expect_ema(graphed_ema, graphed, "graphed");
      double worst = 0;  // the weights' largest relative distance, graphed from eager
      std::string worst_name;
      const auto we = weights(eager), wg = weights(graphed);
      for (const auto& [name, t] : we) {
        if (!t.is_floating_point() || t.norm().item<double>() == 0) continue;
        const double d = (wg.at(name) - t).norm().item<double>() / t.norm().item<double>();
        if (d > worst) worst = d, worst_name = name;
      }
      std::cout << optimizer << " " << precision << ": after 6 steps the graphed weights are " << worst
                << " (relative) from the eager ones at most, at " << worst_name << "\n";
    }
  }
}

// fp16 overflow under LARS and LAMB, eager and graphed: the step is skipped on the device, weights and optimizer
// state as they were (LAMB's step count included); the EMA still updates, toward the unchanged weights.
TEST(GpuTrain, Fp16OverflowSkipsLarsAndLambStepsOnTheDevice) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(11);
  for (const char* optimizer : {"lars", "lamb"}) {
    for (const bool graph : {false, true}) {
      SCOPED_TRACE(std::string(optimizer) + (graph ? " graphed" : " eager"));
      engine::StepRunner runner(resolve_plan(config(graph, "fp16", std::string("optimizer = \"") + optimizer +
                                                               "\"\nema = true\nloss_scale_init = 1e30\n"))
                            .step,
                        10);
      const at::Tensor w0 = runner.model()->fc->weight.detach().clone();
      runner.train_step(images[0], labels[0], 0.05);
      EXPECT_TRUE(runner.model()->fc->weight.equal(w0)) << "an overflowed step changed the weights";
      EXPECT_EQ(runner.loss_scaler()->skipped_steps(), 1);
      for (const auto& [name, t] : runner.optimizer().state()) {
        EXPECT_EQ(t.abs().max().item<double>(), 0.0) << name << ": moved by a skipped first step";
      }
      EXPECT_TRUE(runner.ema()->state().at("fc.weight").equal(w0));
    }
  }
}

// model.blurpool under the fast path (fp16 autocast, channels_last, the fused BN with each conv3 writing its BN's
// statistics, the folded gradient sum, a CUDA graph): the training-mode logits are the plain path's (ATen's
// BatchNorm, eager) under the same autocast, far closer than the unblurred network's; and each graphed step's
// loss is the same fast path's eager step's. fp16 against fp16: against fp32, random residual weights (no zero
// init, so the blur reaches the logits through every block) put fp16's rounding alone at ~4% of the logits.
TEST(GpuTrain, BlurPoolUnderTheFastPathGivesThePlainPathsOutput) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const std::string model = "[model]\nzero_init_residual = false\n";
  const std::string fast_model = model + "blurpool = true\nfused_bn = \"on\"\nfold_grad_add = \"on\"\n";
  const Plan fast = resolve_plan(config(true, "fp16", fast_model));
  const Plan fast_eager = resolve_plan(config(false, "fp16", fast_model));
  const Plan plain = resolve_plan(config(false, "fp16", model + "blurpool = true\nfused_bn = \"off\"\n"));
  const Plan unblurred = resolve_plan(config(false, "fp16", model + "fused_bn = \"off\"\n"));
  ASSERT_TRUE(fast.step.net.fused_bn && fast.step.net.fold_grad_add && fast.step.cuda_graph);
  ASSERT_EQ(fast.step.net.bn_graph, pinfeed::model::GraphBatchNorm::kConv);
  engine::StepRunner fast_runner(fast.step, 10), eager_runner(fast_eager.step, 10), plain_runner(plain.step, 10),
      unblurred_runner(unblurred.step, 10);
  const auto [images, labels] = random_batches(11);
  const at::Tensor first = images[0];
  auto logits = [&first](engine::StepRunner& r) {
    engine::AutocastScope scope(at::kHalf);
    return r.model()->forward(first).to(at::kFloat).detach();  // training mode: the fused kernels' path
  };
  const at::Tensor want = logits(plain_runner);
  const double fast_error = (logits(fast_runner) - want).norm().item<double>() / want.norm().item<double>();
  const double blur_effect = (logits(unblurred_runner) - want).norm().item<double>() / want.norm().item<double>();
  std::cout << "relative logit difference: fast path " << fast_error << ", no blur " << blur_effect << "\n";
  EXPECT_LE(fast_error, 5e-2);
  EXPECT_GE(blur_effect, 0.2);
  for (int i = 0; i < 3; ++i) {  // the first captures the graph, the others replay it
    const double a = eager_runner.train_step(images[i], labels[i], 0.05).item<double>();
    const double b = fast_runner.train_step(images[i], labels[i], 0.05).item<double>();
    EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << "step " << i;
  }
  EXPECT_TRUE(fast_runner.graphed());
}

// Every architecture of the family on the fast path (fused BN, the stem's max pool, fold_grad_add and the conv3
// route where the block has them, the graph) against its plain path (ATen's BN, eager): the first steps' losses
// agree and the graph replays. Zero-initialised residual branches off, so that every block's BN and add are in
// play from the first step. The bound is the graph test's 2%, or twice fp16's own rounding where that is larger:
// the plain fp16 path's largest distance from the plain fp32 path over the same batches at the initial weights
// (lr 0). The rounding grows with depth: resnet152's plain fp16 losses lie up to 3.9% from fp32's on an H100.
TEST(GpuTrain, EveryArchsFastPathTrainsAsItsPlainPath) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(13);
  constexpr int kSteps = 4;  // the first captures the graph, the others replay it
  for (const pinfeed::model::ArchSpec& spec : pinfeed::model::arch_specs()) {
    SCOPED_TRACE(spec.name);
    const std::string model = std::string("[model]\narch = \"") + spec.name + "\"\nzero_init_residual = false\n";
    const std::string plain_model = model + "fused_bn = \"off\"\nmax_pool = \"aten\"\n";
    const Plan fast = resolve_plan(config(true, "fp16", model + "fused_bn = \"on\"\n"));
    const Plan plain = resolve_plan(config(false, "fp16", plain_model));
    ASSERT_TRUE(fast.step.net.fused_bn && fast.step.cuda_graph);
    ASSERT_EQ(fast.step.net.arch, spec.arch);
    const double bound = [&] {
      engine::StepRunner fp32_runner(resolve_plan(config(false, "fp32", plain_model)).step, 10),
          fp16_runner(plain.step, 10);  // same seed: same weights
      double rounding = 0;
      for (int i = 0; i < kSteps; ++i) {
        const double exact = fp32_runner.train_step(images[i], labels[i], 0.0).item<double>();
        const double rounded = fp16_runner.train_step(images[i], labels[i], 0.0).item<double>();
        rounding = std::max(rounding, std::abs(rounded - exact) / std::abs(exact));
      }
      return std::max(2e-2, 2 * rounding);
    }();
    engine::StepRunner fast_runner(fast.step, 10), plain_runner(plain.step, 10);
    double largest = 0;
    for (int i = 0; i < kSteps; ++i) {
      const double a = plain_runner.train_step(images[i], labels[i], 0.02).item<double>();
      const double b = fast_runner.train_step(images[i], labels[i], 0.02).item<double>();
      EXPECT_NEAR(a, b, bound * std::abs(a)) << "step " << i;
      largest = std::max(largest, std::abs(a - b) / std::abs(a));
    }
    std::cout << spec.name << ": largest relative loss difference, fast / plain path: " << largest << " (bound "
              << bound << ")\n";
    EXPECT_TRUE(fast_runner.graphed());
    EXPECT_EQ(fast_runner.graphs(), 1);
  }
}

// A resolution schedule under train.cuda_graph: each side gets its own graph the first time it appears, a switch
// back replays the graph kept for it (no new capture), and every step matches the eager one at that side.
TEST(GpuTrain, CudaGraphSwitchesSidesLikeTheEagerStep) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  at::manual_seed(5);
  const std::vector<int64_t> sides{64, 96, 64, 96, 64, 128};
  for (const char* precision : {"bf16", "fp16"}) {
    engine::StepRunner eager(resolve_plan(config(false, precision)).step, 10),
        graphed(resolve_plan(config(true, precision)).step, 10);
    std::vector<int> graphs;
    for (size_t i = 0; i < sides.size(); ++i) {
      const at::Tensor images =
          at::randn({16, 3, sides[i], sides[i]}, at::TensorOptions().device(cuda)).contiguous(c10::MemoryFormat::ChannelsLast);
      const at::Tensor labels = at::randint(10, {16}, at::TensorOptions().device(cuda).dtype(at::kLong));
      const double a = eager.train_step(images, labels, 0.05).item<double>();
      const double b = graphed.train_step(images, labels, 0.05).item<double>();
      EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << precision << " step " << i << " at " << sides[i] << " px";
      graphs.push_back(graphed.graphs());
    }
    EXPECT_EQ(graphs, (std::vector<int>{1, 2, 2, 2, 2, 3})) << precision;
  }
}

// A schedule's next side: its cuDNN graph plans are built beside the steps at the current side, and its capture
// builds none (fp16's graph routes, cudnn_benchmark off as the schedule's config sets it); every step still
// equals the eager one.
TEST(GpuTrain, PlansBuiltAheadLeaveTheNewSidesCaptureNothingToBuild) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  const bool benchmark = at::globalContext().benchmarkCuDNN();
  at::globalContext().setBenchmarkCuDNN(false);
  at::manual_seed(6);
  engine::StepRunner eager(resolve_plan(config(false, "fp16")).step, 10), graphed(resolve_plan(config(true, "fp16")).step, 10);
  graphed.plan_ahead(80);
  for (const int64_t side : {48, 48, 80, 48, 80}) {
    const at::Tensor images =
        at::randn({16, 3, side, side}, at::TensorOptions().device(cuda)).contiguous(c10::MemoryFormat::ChannelsLast);
    const at::Tensor labels = at::randint(10, {16}, at::TensorOptions().device(cuda).dtype(at::kLong));
    const engine::StepRunner::CaptureCost before = graphed.capture_cost();
    const double b = graphed.train_step(images, labels, 0.05).item<double>();  // first: the eager step would build
    const double a = eager.train_step(images, labels, 0.05).item<double>();
    EXPECT_NEAR(a, b, 2e-2 * std::abs(a)) << side << " px";
    if (side == 80) {
      EXPECT_EQ((graphed.capture_cost() - before).plans, 0) << "a capture at 80 px built plans";
    }
  }
  EXPECT_GT(graphed.capture_cost().plans, 0);  // the first side's capture built them: the route ran
  EXPECT_EQ(graphed.graphs(), 2);
  at::globalContext().setBenchmarkCuDNN(benchmark);
}

// With data.decoder = "nvjpeg" the Feeder's copier keeps decoding (waiting on events, allocating, uploading
// files) while the training thread captures its step: the capture must survive that, and the graphed steps on
// the decoded batches must match the eager ones.
TEST(GpuTrain, CudaGraphIsCapturedWhileTheCopierDecodesWithNvjpeg) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  if (const std::string why = pipeline::JpegDecoder::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string root = test::make_dataset("gpu_graph_nvjpeg", 4, 40, 1, 96);
  auto make_config = [&](bool graph) {
    return parse_config_string("[data]\nroot = \"" + root + "\"\nimage_size = 64\nworkers = 2\ndecoder = \"nvjpeg\"\n" +
                                   "[train]\nbatch_size = 8\nlr = 0.05\nprecision = \"bf16\"\nchannels_last = true\n" +
                                   "cuda_graph = " + (graph ? "true" : "false") + "\n[pipeline]\nmode = \"dual_stream\"\n",
                               "gpu_graph_nvjpeg.toml");
  };
  const Plan graph_plan = resolve_plan(make_config(true));
  ASSERT_TRUE(graph_plan.transform.gpu_decode && graph_plan.step.cuda_graph);
  const Datasets sets = open_datasets(graph_plan, false);
  engine::StepRunner eager(resolve_plan(make_config(false)).step, sets.num_classes);
  engine::StepRunner graphed(graph_plan.step, sets.num_classes);
  pipeline::Feeder feeder(sets.train, graph_plan.train_loader, graph_plan.pipeline, graph_plan.feeder);
  int steps = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {  // the second epoch's first batches decoded during the first's
    feeder.start_epoch(epoch);
    // Each next() frees a place in the copier's queue, so it is decoding the batch after this one while the
    // step (the first graphed one: 3 warm-up runs and the capture) runs.
    while (auto b = feeder.next()) {
      const double want = eager.train_step(b->images, b->labels, 0.05).item<double>();
      const double got = graphed.train_step(b->images, b->labels, 0.05).item<double>();
      EXPECT_NEAR(got, want, 3e-2 * std::abs(want)) << "step " << steps;  // bf16, drifting apart slowly
      ++steps;
    }
  }
  EXPECT_EQ(steps, 2 * 160 / 8);
  EXPECT_TRUE(graphed.graphed());
  EXPECT_GT(feeder.decode_stats()->hardware + feeder.decode_stats()->hybrid, 0);
}

// cuDNN and cuBLAS restricted to deterministic kernels for one test, and put back after it.
class DeterministicKernels {
 public:
  DeterministicKernels() {
    auto& ctx = at::globalContext();
    benchmark_ = ctx.benchmarkCuDNN();
    deterministic_cudnn_ = ctx.deterministicCuDNN();
    deterministic_ = ctx.deterministicAlgorithms();
    warn_only_ = ctx.deterministicAlgorithmsWarnOnly();
    fill_ = ctx.deterministicFillUninitializedMemory();
    ctx.setBenchmarkCuDNN(false);
    ctx.setDeterministicCuDNN(true);
    // warn_only: an op that has no deterministic kernel is named in the test's log instead of failing the step.
    ctx.setDeterministicAlgorithms(true, /*warn_only=*/true);
    ctx.setDeterministicFillUninitializedMemory(false);  // no NaN-filling kernels added to the step
  }
  ~DeterministicKernels() {
    auto& ctx = at::globalContext();
    ctx.setBenchmarkCuDNN(benchmark_);
    ctx.setDeterministicCuDNN(deterministic_cudnn_);
    ctx.setDeterministicAlgorithms(deterministic_, warn_only_);
    ctx.setDeterministicFillUninitializedMemory(fill_);
  }

 private:
  bool benchmark_, deterministic_cudnn_, deterministic_, warn_only_, fill_;
};

// cuBLAS may pick other internal kernels when several streams use it unless its workspace is fixed (PyTorch's
// reproducibility notes); it reads this when its first handle is made, so before any test runs.
const bool kCublasWorkspaceFixed = ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0) == 0;

// A resumed graphed run goes on exactly as the uninterrupted graphed run: capturing its graph (3 eager warm-up
// steps with lr 0, then the captured one, at the resume) neither clears the restored momentum nor moves the BN
// statistics, and replays the same kernels. Graph against graph, bit for bit, with cuDNN autotuning off and
// deterministic kernels only. What could still differ, and why it should not here:
// - cuDNN autotuning (train.cudnn_benchmark) times candidate kernels at each capture and may pick others for
//   the two runs: off here, so its heuristics pick by shape, layout and alignment alone, the same for both.
// - kernels that add floats with atomics in a run-dependent order: cuDNN's convolution backward algorithms
//   (wgrad ALGO_0/ALGO_3, dgrad ALGO_0) are excluded by setDeterministicCuDNN. BN backward (cuDNN's persistent
//   mode reduces through scaled integers; PyTorch's channels-last kernel through a staging buffer in fixed
//   order), 2-D max-pool backward (a gather) and the 1x1 average pool (a mean) add no floats atomically.
// - cuBLAS (fc) across streams: workspace fixed above.
// - fp16's conv3 with BN statistics (model.bn_graph "auto"): with it this test failed (its sums, most likely);
//   under deterministic kernels it gives way to the fused BatchNorm (warning once), which this test covers.
// Should a kernel still differ, the message gives the largest difference of each tensor.
TEST(GpuTrain, CudaGraphResumeEqualsTheUninterruptedGraphedRunBitForBit) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(kCublasWorkspaceFixed);
  const DeterministicKernels deterministic;
  const auto [images, labels] = random_batches(5);
  // SGD in each precision; LARS and LAMB with the EMA of the weights (their state and the EMA in the graph).
  const std::pair<const char*, const char*> variants[] = {
      {"fp32", ""}, {"bf16", ""}, {"fp16", ""}, {"bf16", "optimizer = \"lars\"\nema = true\nema_decay = 0.5\n"},
      {"fp16", "optimizer = \"lamb\"\nema = true\nema_decay = 0.5\n"}};
  for (const auto& [precision, extra] : variants) {
    SCOPED_TRACE(std::string(precision) + " " + extra);
    const Plan plan = resolve_plan(config(true, precision, extra));
    std::vector<at::Tensor> whole_losses, split_losses;
    engine::StepRunner whole(plan.step, 10);
    for (int i = 0; i < 6; ++i) whole_losses.push_back(whole.train_step(images[i], labels[i], 0.05).clone());
    engine::StepRunner first(plan.step, 10);
    for (int i = 0; i < 3; ++i) split_losses.push_back(first.train_step(images[i], labels[i], 0.05).clone());
    const engine::Checkpoint ck = make_checkpoint(first, plan, 0, 3, 3, RunShape{1, 16, 96, 6, {}});
    engine::StepRunner resumed(plan.step, 10);
    restore_checkpoint(resumed, ck);
    for (int i = 3; i < 6; ++i) split_losses.push_back(resumed.train_step(images[i], labels[i], 0.05).clone());
    ASSERT_TRUE(whole.graphs() == 1 && resumed.graphs() == 1);  // full batches: captured, not eager
    for (int i = 0; i < 6; ++i) {
      EXPECT_TRUE(whole_losses[i].equal(split_losses[i]))
          << precision << " loss of step " << i << ": " << whole_losses[i].item<double>() << " vs "
          << split_losses[i].item<double>();
    }
    const engine::Checkpoint a = make_checkpoint(whole, plan, 0, 6, 6, RunShape{1, 16, 96, 6, {}});
    const engine::Checkpoint b = make_checkpoint(resumed, plan, 0, 6, 6, RunShape{1, 16, 96, 6, {}});
    auto expect_equal = [&](const std::map<std::string, at::Tensor>& x, const std::map<std::string, at::Tensor>& y,
                            const char* what) {
      ASSERT_EQ(x.size(), y.size()) << what;
      for (const auto& [name, t] : x) {
        const at::Tensor& u = y.at(name);
        EXPECT_TRUE(t.equal(u)) << precision << " " << what << " " << name << " differs by up to "
                                << (t.to(at::kDouble) - u.to(at::kDouble)).abs().max().item<double>();
      }
    };
    expect_equal(a.model, b.model, "model");
    expect_equal(a.optimizer, b.optimizer, "optimizer state");
    expect_equal(a.loss_scaler, b.loss_scaler, "loss scaler");
    expect_equal(a.model_ema, b.model_ema, "EMA");
    EXPECT_EQ(a.ema_updates, b.ema_updates);
    EXPECT_EQ(a.loss_scaler.empty(), std::string(precision) != "fp16");
  }
}

// The fused BatchNorm against ATen's BN, add and ReLU in the whole step (autocast, loss scaling in fp16, SGD),
// from the same weights and batches: after the first step, BN's running statistics of every layer agree (same
// weights, so only rounding differs); over 200 steps the loss curves agree within 10% (20-step means), at a
// learning rate low enough that training is smooth (at 0.05 both curves spike early and then part by chance).
TEST(GpuTrain, FusedBatchNormTrainsAlongTheUnfusedLossCurve) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  // The fused BatchNorm in both precisions under model.bn_graph "auto" (in fp16 each conv3 writes its BN's
  // statistics), and in fp16 also without that ("small").
  using pinfeed::model::GraphBatchNorm;
  const std::tuple<const char*, const char*, GraphBatchNorm> variants[] = {
      {"bf16", "[model]\nfused_bn = \"on\"\n", GraphBatchNorm::kSmall},
      {"fp16", "[model]\nfused_bn = \"on\"\nbn_graph = \"small\"\n", GraphBatchNorm::kSmall},
      {"fp16", "[model]\nfused_bn = \"on\"\n", GraphBatchNorm::kConv}};
  // The conv3 route falls back with a warning where it cannot run: none may come. (Each warning comes once per
  // process: ctest runs each test in a process of its own, so no earlier test can have used it up.)
  struct Warnings : c10::WarningHandler {
    std::vector<std::string> seen;
    void process(const c10::Warning& w) override { seen.push_back(w.msg()); }
  } warnings;
  const c10::WarningUtils::WarningHandlerGuard catch_warnings(&warnings);
  for (const auto& [precision, model_keys, bn_graph] : variants) {
    SCOPED_TRACE(std::string(precision) + " " + model_keys);
    const Plan fused_plan = resolve_plan(config(false, precision, model_keys));
    const Plan unfused_plan = resolve_plan(config(false, precision, "[model]\nfused_bn = \"off\"\n"));
    ASSERT_TRUE(fused_plan.step.net.fused_bn);
    ASSERT_EQ(fused_plan.step.net.bn_graph, bn_graph) << pinfeed::model::to_string(fused_plan.step.net.bn_graph);
    ASSERT_FALSE(unfused_plan.step.net.fused_bn);
    // same seed: same initial weights
    engine::StepRunner fused(fused_plan.step, 10), unfused(unfused_plan.step, 10);
    auto statistics = [](engine::StepRunner& r) {
      std::map<std::string, at::Tensor> out;
      for (const auto& item : r.model()->named_buffers()) out[item.key()] = item.value().detach().clone();
      return out;
    };
    std::vector<double> losses[2];
    at::manual_seed(5);
    constexpr double kLr = 0.01;
    for (int step = 0; step < 200; ++step) {
      const at::Tensor images = at::randn({32, 3, 64, 64}, at::TensorOptions().device(cuda))
                                    .contiguous(c10::MemoryFormat::ChannelsLast);
      // Labels the model can learn: the class from the image's mean brightness.
      const at::Tensor labels = (images.mean({1, 2, 3}) * 80 + 5).clamp(0, 9).to(at::kLong);
      losses[0].push_back(unfused.train_step(images, labels, kLr).item<double>());
      losses[1].push_back(fused.train_step(images, labels, kLr).item<double>());
      if (step == 0) {
        const auto a = statistics(unfused), b = statistics(fused);
        for (const auto& [name, t] : a) {
          const at::Tensor u = b.at(name).to(at::kDouble), r = t.to(at::kDouble);
          EXPECT_LE((u - r).norm().item<double>(), 2e-2 * r.norm().item<double>()) << name << " after one step";
        }
      }
    }
    auto mean = [](const std::vector<double>& v, int from) {
      double s = 0;
      for (int i = from; i < from + 20; ++i) s += v[i] / 20;
      return s;
    };
    // It learns the labels' spread within the first 20 steps (from ln 10 = 2.3 to about 1.4), then slowly.
    EXPECT_LT(mean(losses[0], 180), 0.9 * losses[0][0]) << "the unfused model did not learn: the comparison would "
                                                            "prove nothing";
    std::string curves;
    for (int s = 0; s < 200; s += 20) {
      curves += " " + std::to_string(mean(losses[0], s)) + "/" + std::to_string(mean(losses[1], s));
      EXPECT_NEAR(mean(losses[1], s), mean(losses[0], s), 0.1 * mean(losses[0], s)) << "steps " << s << "-" << s + 19;
    }
    std::cout << precision << " (" << pinfeed::model::to_string(fused_plan.step.net.bn_graph) << ") 20-step mean losses, unfused/fused:"
              << curves << "\n";
  }
  for (const std::string& w : warnings.seen) {
    EXPECT_EQ(w.find("cannot come from the convolution"), std::string::npos) << w;  // the route's fallback
    EXPECT_EQ(w.find("graph API cannot"), std::string::npos) << w;                   // the graph BatchNorm's
  }
}

// fp16 with a loss scale so large that the gradients overflow: the step is skipped (weights and momentum as
// they were), the scale halves and the skip is counted, eager and graphed alike; later steps train.
TEST(GpuTrain, Fp16OverflowSkipsTheStepAndHalvesTheLossScale) {
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const auto [images, labels] = random_batches(9);
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graphed" : "eager");
    engine::StepRunner runner(resolve_plan(config(graph, "fp16", "loss_scale_init = 1e30\n")).step, 10);
    ASSERT_NE(runner.loss_scaler(), nullptr);
    const at::Tensor w0 = runner.model()->fc->weight.detach().clone();
    runner.train_step(images[0], labels[0], 0.05);
    EXPECT_TRUE(runner.model()->fc->weight.equal(w0)) << "an overflowed step changed the weights";
    EXPECT_FLOAT_EQ(static_cast<float>(runner.loss_scaler()->current_scale()), 5e29f);  // float32 halved: exact
    EXPECT_EQ(runner.loss_scaler()->skipped_steps(), 1);
    // Each overflow halves the scale: about 100 halvings bring 1e30 down to where fp16 gradients fit.
    int64_t steps = 1;
    while (runner.model()->fc->weight.equal(w0) && steps < 200) {
      runner.train_step(images[steps % 6], labels[steps % 6], 0.05);
      ++steps;
    }
    EXPECT_FALSE(runner.model()->fc->weight.equal(w0)) << "no step was taken in 200";
    EXPECT_EQ(runner.loss_scaler()->skipped_steps(), steps - 1);
    EXPECT_LT(runner.loss_scaler()->current_scale(), 1e30 / std::pow(2.0, static_cast<double>(steps - 2)));
  }
}

}  // namespace
}  // namespace pinfeed::app

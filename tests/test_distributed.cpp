// Data-parallel training across processes: 2 ranks on the CPU through Gloo (CI), and through NCCL where 2 GPUs
// are at hand (label gpu). Every rank is a fresh process: this binary started again with PINFEED_TEST_RANK_MAIN
// naming the rank's part below, or the pinfeed executable itself, with the variables torchrun would set.
#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/tensor.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "engine/dist/distributed.h"
#include "engine/dist/grad_sync.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "app/plan/plan.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/step/step_runner.h"
#include "app/train/evaluate.h"
#include "data/loader/shard.h"
#include "rank_process.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {
namespace fs = std::filesystem;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// A small MLP without batch statistics, so N ranks of batch B must step exactly as 1 rank of batch N*B.
struct Mlp {
  std::vector<at::Tensor> params;  // w1 (16, 8), b1 (16), w2 (4, 16), b2 (4)
  explicit Mlp(c10::Device device) {
    at::manual_seed(7);
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{16, 8}, {16}, {4, 16}, {4}}) {
      params.push_back((at::randn(shape) * 0.3).to(device).set_requires_grad(true));
    }
  }
  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) const {
    const at::Tensor h = at::relu(at::linear(x, params[0], params[1]));
    return at::cross_entropy_loss(at::linear(h, params[2], params[3]), y);
  }
  std::vector<std::pair<std::string, at::Tensor>> named() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (size_t i = 0; i < params.size(); ++i) out.emplace_back("p" + std::to_string(i), params[i]);
    return out;
  }
};

constexpr int kSteps = 6, kBatch = 5;

// The global batch of a step: 2 * kBatch samples per micro-batch (accumulate of them), the same on every process.
std::pair<at::Tensor, at::Tensor> global_batch(int step, c10::Device device, int accumulate = 1) {
  at::manual_seed(1000 + step);
  const at::Tensor x = at::randn({2 * kBatch * accumulate, 8});
  const at::Tensor y = at::randint(4, {2 * kBatch * accumulate}, at::TensorOptions().dtype(at::kLong));
  return {x.to(device), y.to(device)};
}

at::Tensor flat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.detach().cpu().reshape(-1));
  return at::cat(parts);
}

void write_tensor(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

at::Tensor read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size() / 4)}, at::kFloat);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// Rank part: kSteps SGD steps of the MLP on this rank's half of each global batch, gradients averaged by
// GradSync (small buckets, so there are several); writes the final parameters to OUT/rank<r>.bin.
int rank_grad_sync() {
  const engine::DistEnv env = engine::dist_env_from_environment();
  const std::string backend = env_or("PINFEED_TEST_BACKEND", "gloo");
  const c10::Device device = backend == "nccl" ? c10::Device(c10::kCUDA, env.local_rank) : c10::Device(c10::kCPU);
  engine::Distributed dist(env, device, backend, std::chrono::seconds(20));
  return dist.guard([&] {
    Mlp mlp(device);
    dist.broadcast(mlp.params);
    engine::GradSync sync(mlp.params, dist.backend(), /*bucket_bytes=*/300, env_or("PINFEED_TEST_OVERLAP", "1") == "1");
    engine::Sgd sgd(mlp.named(), {}, {0.9, false, 1e-4});
    const int die_after = std::atoi(env_or("PINFEED_TEST_DIE_AFTER", "0").c_str());
    // Gradient accumulation as StepRunner does it: each micro-batch's loss / accumulate, the hooks reducing only
    // in the last micro-batch's backward. Rank r takes micro-batches r * accumulate ... of each global batch.
    const int accumulate = std::atoi(env_or("PINFEED_TEST_ACCUMULATE", "1").c_str());
    for (int step = 0; step < kSteps; ++step) {
      if (die_after > 0 && env.rank == 1 && step == die_after) std::_Exit(9);  // as if killed
      const auto [x, y] = global_batch(step, device, accumulate);
      sgd.zero_grad();
      for (int m = 0; m < accumulate; ++m) {
        sync.set_reduce(m + 1 == accumulate);
        const int64_t at = (env.rank * accumulate + m) * kBatch;
        (mlp.loss(x.narrow(0, at, kBatch), y.narrow(0, at, kBatch)) / accumulate).backward();
      }
      sync.finish_step();
      sgd.step(0.1);
    }
    write_tensor(env_or("PINFEED_TEST_OUT", ".") + "/rank" + std::to_string(env.rank) + ".bin", flat(mlp.params));
    return 0;
  });
}

// Rank part: the fp16 loss scaling of the step (StepRunner's order: backward of the scaled loss, gradients
// averaged, unscaled and checked, the optimizer skipping on found_inf, the scale updated), on the MLP. At step
// kOverflowStep only rank 1's gradients overflow. Writes the final parameters to OUT/rank<r>.bin and
// "scale skipped" to OUT/scaler<r>.txt.
constexpr int kOverflowStep = 2;
int rank_loss_scaler() {
  const engine::DistEnv env = engine::dist_env_from_environment();
  const c10::Device device(c10::kCPU);
  engine::Distributed dist(env, device, "gloo", std::chrono::seconds(20));
  return dist.guard([&] {
    Mlp mlp(device);
    dist.broadcast(mlp.params);
    engine::GradSync sync(mlp.params, dist.backend(), /*bucket_bytes=*/300, /*overlap=*/true);
    engine::Sgd sgd(mlp.named(), {}, {0.9, false, 1e-4});
    engine::LossScalerOptions o;
    o.init_scale = 1024;
    o.growth_interval = 1000;
    engine::LossScaler scaler(device, o);
    for (int step = 0; step < kSteps; ++step) {
      const auto [x, y] = global_batch(step, device);
      sgd.zero_grad();
      at::Tensor loss = scaler.scale(mlp.loss(x.narrow(0, env.rank * kBatch, kBatch), y.narrow(0, env.rank * kBatch, kBatch)));
      if (env.rank == 1 && step == kOverflowStep) loss = loss * std::numeric_limits<float>::infinity();
      loss.backward();
      sync.finish_step();
      std::vector<at::Tensor> grads;
      for (const at::Tensor& p : mlp.params) grads.push_back(p.grad());
      scaler.unscale(grads);
      sgd.step(0.1, scaler.found_inf());
      scaler.update();
    }
    const std::string out = env_or("PINFEED_TEST_OUT", ".");
    write_tensor(out + "/rank" + std::to_string(env.rank) + ".bin", flat(mlp.params));
    std::ofstream(out + "/scaler" + std::to_string(env.rank) + ".txt")
        << scaler.current_scale() << " " << scaler.skipped_steps() << "\n";
    return 0;
  });
}

// Rank part: distributed validation of an untrained ResNet over PINFEED_TEST_DATA's val split; writes
// "samples top1" to OUT/eval<r>.txt.
int rank_eval() {
  const engine::DistEnv env = engine::dist_env_from_environment();
  const Config config = parse_config_string("[data]\nimage_size = 32\nworkers = 1\n[train]\ndevice = \"cpu\"\n"
                                            "batch_size = 5\nprecision = \"fp32\"\n[model]\narch = \"resnet18\"\n",
                                            "eval.toml", {"data.root=\"" + env_or("PINFEED_TEST_DATA", "") + "\""});
  const Plan plan = resolve_plan(config, env);
  engine::Distributed dist(env, plan.device, name_of(plan.backend), std::chrono::seconds(20));
  auto val = std::make_shared<data::Dataset>(data::scan_image_folder(plan.dataset.root, "val"), plan.transform, false,
                                             plan.dataset.on_bad_image);
  engine::StepRunner runner(plan.step, 3, &dist);
  pipeline::Feeder feed(val, plan.val_loader, plan.pipeline, plan.feeder);
  const EvalResult r = evaluate(runner, feed, &dist);
  std::ofstream(env_or("PINFEED_TEST_OUT", ".") + "/eval" + std::to_string(env.rank) + ".txt")
      << r.samples << " " << r.top1 << "\n";
  return 0;
}

std::vector<std::string> rank_env(const std::string& part, const std::string& out,
                                  std::vector<std::string> more = {}) {
  more.push_back("PINFEED_TEST_RANK_MAIN=" + part);
  more.push_back("PINFEED_TEST_OUT=" + out);
  return more;
}

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_two_ranks_match_one_rank_of_twice_the_batch(const std::string& backend, bool overlap, int accumulate = 1) {
  const std::string out =
      test::fresh_dir("dp_sync_" + backend + (overlap ? "1" : "0") + "_" + std::to_string(accumulate));
  const auto exits = test::run_ranks(2, {self_exe()}, 120,
                                     rank_env("grad_sync", out, {"PINFEED_TEST_BACKEND=" + backend,
                                                                  std::string("PINFEED_TEST_OVERLAP=") + (overlap ? "1" : "0"),
                                                                  "PINFEED_TEST_ACCUMULATE=" + std::to_string(accumulate)}),
                                     out + "/rank");
  for (int r = 0; r < 2; ++r) ASSERT_EQ(exits[r].code, 0) << read_text(out + "/rank" + std::to_string(r) + ".log");
  const at::Tensor rank0 = read_floats(out + "/rank0.bin"), rank1 = read_floats(out + "/rank1.bin");
  EXPECT_TRUE(rank0.equal(rank1)) << "ranks disagree by " << (rank0 - rank1).abs().max().item<double>();

  // One process, the whole global batch, no synchronisation.
  Mlp mlp(c10::Device(c10::kCPU));
  engine::Sgd sgd(mlp.named(), {}, {0.9, false, 1e-4});
  for (int step = 0; step < kSteps; ++step) {
    const auto [x, y] = global_batch(step, c10::Device(c10::kCPU), accumulate);
    sgd.zero_grad();
    mlp.loss(x, y).backward();
    sgd.step(0.1);
  }
  const at::Tensor single = flat(mlp.params);
  ASSERT_EQ(single.numel(), rank0.numel());
  EXPECT_TRUE(at::allclose(rank0, single, 1e-5, 1e-6)) << "max difference " << (rank0 - single).abs().max().item<double>();
  EXPECT_FALSE(at::allclose(rank0, flat(Mlp(c10::Device(c10::kCPU)).params))) << "the weights did not move";
}

TEST(DataParallel, TwoRanksOfBatchBEndWithTheWeightsOfOneRankOfBatch2B) {
  expect_two_ranks_match_one_rank_of_twice_the_batch("gloo", /*overlap=*/true);
}

TEST(DataParallel, WithoutOverlapTheAverageIsTheSame) {
  expect_two_ranks_match_one_rank_of_twice_the_batch("gloo", /*overlap=*/false);
}

// train.accumulate_steps 3 on 2 ranks: the ranks' weights equal, and those of one rank stepping on all 6
// micro-batches at once; the all-reduce runs once per optimizer step.
TEST(DataParallel, AccumulatingThreeMicroBatchesOnTwoRanksStepsAsOneRankOfAllSix) {
  expect_two_ranks_match_one_rank_of_twice_the_batch("gloo", /*overlap=*/true, /*accumulate=*/3);
}

TEST(DataParallel, NcclOnTwoGpusMatchesOneRankOfBatch2B) {
  if (!gpu::available() || torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  expect_two_ranks_match_one_rank_of_twice_the_batch("nccl", /*overlap=*/true);
}

// A step that overflows on one rank only is skipped by both: the check runs on the averaged gradients. Both end
// with the same weights, the scale halved once and one skipped step; the weights are those of the run that never
// took that step, and not the start's.
TEST(DataParallel, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  const std::string out = test::fresh_dir("dp_loss_scaler");
  const auto exits = test::run_ranks(2, {self_exe()}, 120, rank_env("loss_scaler", out), out + "/rank");
  for (int r = 0; r < 2; ++r) ASSERT_EQ(exits[r].code, 0) << read_text(out + "/rank" + std::to_string(r) + ".log");
  const at::Tensor rank0 = read_floats(out + "/rank0.bin"), rank1 = read_floats(out + "/rank1.bin");
  EXPECT_TRUE(rank0.equal(rank1)) << "ranks disagree by " << (rank0 - rank1).abs().max().item<double>();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(read_text(out + "/scaler" + std::to_string(r) + ".txt"), "512 1\n") << "rank " << r;

  // One process, the whole global batch, the overflowing step left out.
  Mlp mlp(c10::Device(c10::kCPU));
  engine::Sgd sgd(mlp.named(), {}, {0.9, false, 1e-4});
  for (int step = 0; step < kSteps; ++step) {
    if (step == kOverflowStep) continue;
    const auto [x, y] = global_batch(step, c10::Device(c10::kCPU));
    sgd.zero_grad();
    mlp.loss(x, y).backward();
    sgd.step(0.1);
  }
  EXPECT_TRUE(at::allclose(rank0, flat(mlp.params), 1e-5, 1e-6))
      << "max difference " << (rank0 - flat(mlp.params)).abs().max().item<double>();
  EXPECT_FALSE(at::allclose(rank0, flat(Mlp(c10::Device(c10::kCPU)).params))) << "the weights did not move";
}

TEST(DataParallel, ShardsAreDisjointAndCoverTheEpoch) {
  for (int64_t n : {1, 7, 40, 41, 99}) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    for (int ranks : {1, 2, 3}) {
      for (int64_t batch : {1, 4}) {
        for (bool drop_last : {true, false}) {
          std::multiset<int64_t> seen;
          size_t first_size = 0;
          for (int r = 0; r < ranks; ++r) {
            const auto mine = data::shard_of(order, batch, r, ranks, drop_last);
            if (r == 0) first_size = mine.size();
            if (drop_last) {
              EXPECT_EQ(mine.size(), first_size) << "equal steps on every rank";
            }
            seen.insert(mine.begin(), mine.end());
          }
          const int64_t expect = drop_last ? n / (batch * ranks) * batch * ranks : n;
          EXPECT_EQ(static_cast<int64_t>(seen.size()), expect) << n << " " << ranks << " " << batch;
          EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample twice";
        }
      }
    }
  }
  // Rank r's k-th batch is the r-th part of global batch k: N ranks of B see what 1 rank of N*B sees.
  std::vector<int64_t> order(20);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_EQ(data::shard_of(order, 2, 1, 2, true), (std::vector<int64_t>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19}));
}

TEST(DataParallel, DistributedEvalCountsEverySampleOnce) {
  // 3 classes x 4 val images = 12, batch 5 on 2 ranks: rank 0 evaluates 7, rank 1 5.
  const std::string root = test::make_dataset("dp_eval", 3, 2, 4, 32);
  const std::string out = test::fresh_dir("dp_eval_out");
  const auto exits = test::run_ranks(2, {self_exe()}, 120, rank_env("eval", out, {"PINFEED_TEST_DATA=" + root}),
                                     out + "/rank");
  for (int r = 0; r < 2; ++r) ASSERT_EQ(exits[r].code, 0) << read_text(out + "/rank" + std::to_string(r) + ".log");
  EXPECT_EQ(read_text(out + "/eval0.txt"), read_text(out + "/eval1.txt"));
  EXPECT_EQ(read_text(out + "/eval0.txt").substr(0, 3), "12 ");
}

TEST(DataParallel, ARankThatDiesEndsTheOtherNonZeroInBoundedTime) {
  const std::string out = test::fresh_dir("dp_die");
  const auto exits = test::run_ranks(2, {self_exe()}, 90, rank_env("grad_sync", out, {"PINFEED_TEST_DIE_AFTER=2"}),
                                     out + "/rank");
  EXPECT_EQ(exits[1].code, 9);
  const std::string log = read_text(out + "/rank0.log");
  EXPECT_EQ(exits[0].code, 5) << log;  // 137: rank 0 hung until the test killed it
  EXPECT_NE(log.find("rank 1 (host "), std::string::npos) << log;
}

// The pinfeed executable, as torchrun would start it.
std::string tiny_config(const std::string& dir, const std::string& root) {
  const std::string path = dir + "/tiny.toml";
  std::ofstream(path) << "[data]\nroot = \"" << root << "\"\nimage_size = 32\nworkers = 1\n"
                      << "[train]\nepochs = 2\nbatch_size = 4\nlr = 0.05\nprecision = \"fp32\"\ndevice = \"cpu\"\n"
                      << "[model]\narch = \"resnet18\"\n[pipeline]\nwarmup_steps = 1\n[dist]\ntimeout_s = 30\n[run]\ndir = \"" << dir << "/runs\"\n";
  return path;
}

TEST(DataParallel, AConfigThatDiffersBetweenRanksIsRefusedNamingTheRankAndTheOtherStops) {
  const std::string root = test::make_dataset("dp_cfg", 2, 8, 2, 32);
  const std::string dir = test::fresh_dir("dp_cfg_runs");
  const std::string config = tiny_config(dir, root);
  // Rank 1 runs with another seed.
  const auto exits = test::run_ranks(
      2, {"/bin/sh", "-c", std::string("exec ") + PINFEED_EXE + " train -c " + config + " train.seed=$RANK"}, 90, {},
      dir + "/rank");
  const std::string log1 = read_text(dir + "/rank1.log");
  EXPECT_EQ(exits[1].code, 2) << log1;
  EXPECT_NE(log1.find("[rank 1] error: this rank's config differs from rank 0's"), std::string::npos) << log1;
  EXPECT_NE(log1.find("seed"), std::string::npos) << log1;
  EXPECT_NE(exits[0].code, 0);
  EXPECT_NE(exits[0].code, 137) << "rank 0 hung until the test killed it";
  EXPECT_NE(read_text(dir + "/rank0.log").find("rank 1"), std::string::npos) << read_text(dir + "/rank0.log");
}

int lines_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

// Rank `victim` is killed with SIGKILL once training is under way (rank 0 has shown a step): the other rank
// names it in one line, without c10d's stack frames, and exits 5. The bound is the run's own process limit,
// generous for a busy machine; a survivor that hangs is killed there and reads 137.
void expect_a_killed_rank_is_named_by_the_other(int victim) {
  const std::string root = test::make_dataset("dp_kill_data" + std::to_string(victim), 2, 40, 2, 32);
  const std::string dir = test::fresh_dir("dp_kill" + std::to_string(victim));
  pid_t killed = 0;
  test::RankControl control;
  control.poll = [&](const std::vector<pid_t>& pids) {
    if (killed != 0 || pids[victim] <= 0) return;
    if (read_text(dir + "/rank0.log").find(" step ") == std::string::npos) return;
    killed = pids[victim];
    ::kill(killed, SIGKILL);
  };
  const auto exits = test::run_ranks(
      2, {PINFEED_EXE, "train", "-c", tiny_config(dir, root), "train.epochs=5", "run.progress_interval_s=0.1"}, 60,
      {}, dir + "/rank", control);
  const int survivor = 1 - victim;
  const std::string log = read_text(dir + "/rank" + std::to_string(survivor) + ".log");
  ASSERT_NE(killed, 0) << "the run ended before it showed a step: " << log;
  EXPECT_EQ(exits[victim].code, 128 + SIGKILL);
  EXPECT_EQ(exits[survivor].code, 5) << log;
  EXPECT_NE(log.find("[rank " + std::to_string(survivor) + "] error: rank " + std::to_string(victim) + " (host "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("pid " + std::to_string(killed) + ") stopped answering"), std::string::npos) << log;
  EXPECT_EQ(lines_with(log, "error"), 1) << "one line says why: " << log;
  EXPECT_EQ(log.find("frame #"), std::string::npos) << log;
}

TEST(DataParallel, ARankKilledMidRunIsNamedByRankZeroWhichExits5) { expect_a_killed_rank_is_named_by_the_other(1); }

// Rank 0 serves the store: its death shows to the others as a store that closed.
TEST(DataParallel, RankZeroKilledMidRunIsNamedByTheOtherWhichExits5) { expect_a_killed_rank_is_named_by_the_other(0); }

// The launcher started one rank but not the other: the one started waits dist.timeout_s (5 s here), then
// names the missing rank and exits 5.
void expect_a_rank_that_never_starts_is_named(int absent) {
  const std::string root = test::make_dataset("dp_absent_data" + std::to_string(absent), 2, 4, 1, 32);
  const std::string dir = test::fresh_dir("dp_absent" + std::to_string(absent));
  test::RankControl control;
  control.absent = {absent};
  const auto exits = test::run_ranks(2, {PINFEED_EXE, "train", "-c", tiny_config(dir, root), "dist.timeout_s=5"},
                                     60, {}, dir + "/rank", control);
  const int started = 1 - absent;
  const std::string log = read_text(dir + "/rank" + std::to_string(started) + ".log");
  EXPECT_EQ(exits[started].code, 5) << log;
  EXPECT_NE(log.find("[rank " + std::to_string(started) + "] error: rank " + std::to_string(absent) +
                     " never joined"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("dist.timeout_s = 5 s"), std::string::npos) << log;
  EXPECT_EQ(lines_with(log, "error"), 1) << log;
  EXPECT_EQ(log.find("frame #"), std::string::npos) << log;
}

TEST(DataParallel, ARankThatNeverStartsIsNamedByRankZeroAfterTheTimeout) { expect_a_rank_that_never_starts_is_named(1); }

TEST(DataParallel, ARankZeroThatNeverStartsIsNamedByTheOthersAfterTheTimeout) {
  expect_a_rank_that_never_starts_is_named(0);
}

std::vector<fs::path> sorted_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());  // (class, file name): the ImageFolder's sample order
  return files;
}

// Each rank finds the bad files of its own shards; rank 0 lists every rank's once in bad_images.tsv and counts
// the training set's distinct bad files in the metrics. The run's logs show that the case is real: a file only
// rank 1 found, and a file both ranks found (each epoch shards a new permutation).
TEST(DataParallel, EveryRanksBadFilesAreListedOnceByRankZero) {
  const std::string root = test::make_dataset("dp_bad", 2, 16, 6, 32);  // 32 train images, 12 val
  const std::string dir = test::fresh_dir("dp_bad_runs");
  const std::vector<fs::path> train = sorted_files(fs::path(root) / "train");
  const std::vector<fs::path> val = sorted_files(fs::path(root) / "val");
  std::set<std::string> bad_train;
  for (size_t i : {1, 6, 12, 17, 22, 29}) bad_train.insert(train.at(i).string());
  // Val is not shuffled: with batch 4 on 2 ranks, rank 1 evaluates samples 4-7 and rank 0 the rest.
  const std::string bad_val = val.at(5).string();
  std::set<std::string> bad = bad_train;
  bad.insert(bad_val);
  for (const std::string& path : bad) std::ofstream(path, std::ios::binary | std::ios::trunc) << "not an image";

  const auto exits = test::run_ranks(
      2, {PINFEED_EXE, "train", "-c", tiny_config(dir, root), "run.name=\"bad\""}, 300, {}, dir + "/rank");
  const std::string log0 = read_text(dir + "/rank0.log"), log1 = read_text(dir + "/rank1.log");
  for (const auto& e : exits) ASSERT_EQ(e.code, 0) << log0 << log1;
  auto found_by = [](const std::string& log, const std::string& path) {
    return log.find("bad image " + path + ":") != std::string::npos;
  };
  EXPECT_TRUE(found_by(log1, bad_val) && !found_by(log0, bad_val)) << "rank 1 alone evaluates " << bad_val;
  bool only_rank1 = false, both = false;
  for (const std::string& path : bad_train) {
    only_rank1 |= found_by(log1, path) && !found_by(log0, path);
    both |= found_by(log1, path) && found_by(log0, path);
  }
  ASSERT_TRUE(only_rank1 && both) << "the shards no longer make the case this test needs: pick other files";

  fs::path run;
  for (const auto& d : fs::directory_iterator(dir + "/runs")) run = d.path();
  std::ifstream tsv(run / "bad_images.tsv");
  std::string line;
  std::getline(tsv, line);
  EXPECT_EQ(line, "path\treason");
  std::multiset<std::string> listed;
  while (std::getline(tsv, line)) listed.insert(line.substr(0, line.find('\t')));
  EXPECT_EQ(listed, std::multiset<std::string>(bad.begin(), bad.end())) << "every rank's bad files, each once";
  const std::vector<nlohmann::json> rows = test::learning_rows(run / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    // Epoch 1 loads every training image once across the ranks.
    EXPECT_EQ(row.at("bad_images"), bad_train.size()) << "the training set's distinct bad files: " << row;
  }
}

std::map<std::string, at::Tensor> all_state(const std::string& checkpoint) {
  const engine::Checkpoint ck = engine::load_checkpoint(checkpoint);
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, v] : ck.model) out["model." + k] = v;
  for (const auto& [k, v] : ck.optimizer) out["momentum." + k] = v;
  for (const auto& [k, v] : ck.model_ema) out["model_ema." + k] = v;
  out["ema_updates"] = at::tensor(ck.ema_updates);
  return out;
}

// The last.pt of the one run under dir/runs whose folder name ends in `suffix`; "" if none.
std::string last_checkpoint(const std::string& dir, const std::string& suffix) {
  for (const auto& d : fs::directory_iterator(dir + "/runs")) {
    const std::string n = d.path().filename().string();
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return (d.path() / "last.pt").string();
    }
  }
  return std::string();
}

// dist.one_rank_group through the executable: one rank in a group of its own (Gloo on the CPU) says so and ends
// with the weights, momentum and metrics of the same run without a group, to the bit (an average over one rank).
TEST(DataParallel, OneRankInAGroupOfItsOwnTrainsBitForBitAsWithout) {
  const std::string root = test::make_dataset("dp_one_rank", 2, 8, 1, 32);
  const std::string dir = test::fresh_dir("dp_one_rank_runs");
  const std::string config = tiny_config(dir, root);
  for (const bool grouped : {false, true}) {
    const std::string name = grouped ? "grouped" : "alone";
    const auto exits = test::run_ranks(1, {PINFEED_EXE, "train", "-c", config, "run.name=\"" + name + "\"",
                                           "train.epochs=1", std::string("dist.one_rank_group=") + (grouped ? "true" : "false")},
                                       120, {}, dir + "/" + name + "_rank");
    ASSERT_EQ(exits.at(0).code, 0) << read_text(dir + "/" + name + "_rank0.log");
    EXPECT_EQ(read_text(dir + "/" + name + "_rank0.log").find("one rank in a group of its own") != std::string::npos,
              grouped);
  }
  const auto alone = all_state(last_checkpoint(dir, "-alone")), grouped = all_state(last_checkpoint(dir, "-grouped"));
  ASSERT_EQ(alone.size(), grouped.size());
  for (const auto& [name, t] : alone) EXPECT_TRUE(t.equal(grouped.at(name))) << name;
  EXPECT_EQ(test::learning_rows(fs::path(last_checkpoint(dir, "-grouped")).parent_path() / "metrics.jsonl"),
            test::learning_rows(fs::path(last_checkpoint(dir, "-alone")).parent_path() / "metrics.jsonl"));
}

TEST(DataParallel, ResumeMidEpochWithTwoRanksEqualsTheUninterruptedRun) {
  // 200 images: 25 steps of 2 x 4 in its one epoch, accumulated by 2 (train.accumulate_steps: 12 optimizer steps
  // and the epoch's last on the one batch left). A stop asked for at step 3 is voted on at step 10 and acted on at
  // step 20 (StopVote: between two optimizer steps), mid-epoch.
  const std::string root = test::make_dataset("dp_resume", 2, 100, 2, 32);
  const std::string dir = test::fresh_dir("dp_resume_runs");
  const std::string config = tiny_config(dir, root);
  const std::string exe = PINFEED_EXE;
  // With the EMA of the weights: its BN statistics stay per rank until the epoch ends as the model's do.
  auto run = [&](const std::string& name, const std::vector<std::string>& more) {
    std::vector<std::string> argv{exe, "train", "-c", config, "run.name=\"" + name + "\"", "train.ema=true",
                                  "train.ema_decay=0.5", "train.epochs=1", "train.accumulate_steps=2"};
    argv.insert(argv.end(), more.begin(), more.end());
    return test::run_ranks(2, argv, 300, {}, dir + "/" + name + "_rank");
  };
  for (const auto& e : run("whole", {})) ASSERT_EQ(e.code, 0) << read_text(dir + "/whole_rank0.log");
  // Stop after 3 steps: the ranks agree at their votes and save mid-epoch.
  const auto stopped = run("split", {"--stop-after-steps", "3"});
  for (const auto& e : stopped) ASSERT_EQ(e.code, 130) << read_text(dir + "/split_rank0.log");
  for (const auto& e : run("split", {"--resume", "last"})) ASSERT_EQ(e.code, 0) << read_text(dir + "/split_rank0.log");

  auto last = [&](const std::string& suffix) { return last_checkpoint(dir, suffix); };
  const auto whole = all_state(last("-whole")), split = all_state(last("-split"));
  ASSERT_EQ(whole.size(), split.size());
  // BN statistics too: they stay per rank until the epoch ends, and the checkpoint keeps every rank's.
  for (const auto& [name, t] : whole) {
    const at::Tensor& u = split.at(name);
    EXPECT_TRUE(t.equal(u)) << name << " differs by " << (t - u).abs().max().item<double>();
  }
  // The metrics too (the loss is each rank's sum over the whole epoch, across the resume).
  EXPECT_EQ(test::learning_rows(fs::path(last("-split")).parent_path() / "metrics.jsonl"),
            test::learning_rows(fs::path(last("-whole")).parent_path() / "metrics.jsonl"));

  // Rank 0 alone writes the folder: run.json records each start (world size 2), run.log holds its lines. A resume
  // of the finished run ends on every rank at once, saying so, with nothing written.
  const fs::path split_dir = fs::path(last("-split")).parent_path();
  const nlohmann::json record = nlohmann::json::parse(read_text((split_dir / "run.json").string()));
  ASSERT_EQ(record.at("starts").size(), 2u);
  EXPECT_EQ(record["starts"][1].at("world_size"), 2);
  const std::string log = read_text((split_dir / "run.log").string());
  EXPECT_NE(log.find("resuming from"), std::string::npos);
  EXPECT_NE(log.find("25 steps/epoch"), std::string::npos) << log;
  EXPECT_NE(log.find("at epoch 1 step 20;"), std::string::npos) << log;  // mid-epoch: 20 of 25
  for (const auto& e : run("split", {"--resume", "last"})) ASSERT_EQ(e.code, 0) << read_text(dir + "/split_rank0.log");
  EXPECT_NE(read_text(dir + "/split_rank0.log").find("already finished all"), std::string::npos)
      << read_text(dir + "/split_rank0.log");
  EXPECT_EQ(nlohmann::json::parse(read_text((split_dir / "run.json").string())).at("starts").size(), 2u);
}

}  // namespace
}  // namespace pinfeed::app

int main(int argc, char** argv) {
  const char* part = std::getenv("PINFEED_TEST_RANK_MAIN");
  if (part) {
    try {
      if (std::string(part) == "grad_sync") return pinfeed::app::rank_grad_sync();
      if (std::string(part) == "eval") return pinfeed::app::rank_eval();
      if (std::string(part) == "loss_scaler") return pinfeed::app::rank_loss_scaler();
    } catch (const pinfeed::engine::PeerFailed& e) {
      std::fprintf(stderr, "rank stopped: %s\n", e.what());
      return 5;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank failed: %s\n", e.what());
      return 1;
    }
    return 64;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

#include <gtest/gtest.h>

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "engine/optim/lr_schedule.h"
#include "engine/checkpoint/checkpoint.h"
#include "app/run/metrics.h"
#include "app/run/run_files.h"
#include "engine/signals.h"
#include "app/train/epoch_report.h"
#include "app/train/evaluate.h"
#include "app/train/loss_meter.h"
#include "app/train/trainer.h"
#include "data/error.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

Config tiny_config(const std::string& root, const std::string& runs, int epochs) {
  return parse_config_string("[data]\nimage_size = 32\nworkers = 2\n[train]\ndevice = \"cpu\"\nbatch_size = 16\n"
                             "lr = 0.01\nwarmup_epochs = 0\nweight_decay = 0\nprecision = \"fp32\"\n"
                             "[model]\narch = \"resnet18\"\n[pipeline]\nwarmup_steps = 1\n[run]\nname = \"t\"\n",
                             "tiny.toml",
                             {"data.root=\"" + root + "\"", "run.dir=\"" + runs + "\"",
                              "train.epochs=" + std::to_string(epochs)});
}

TEST(Train, ShortCpuRunLowersTheLossAndWritesItsRun) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_small", 2, 24, 4, 32);
  const std::string runs = test::fresh_dir("train_runs");
  const TrainResult r = train(resolve_plan(tiny_config(root, runs, 4)), {}, stop);
  ASSERT_EQ(r.epochs.size(), 4u);
  EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
  for (const char* f : {"metrics.csv", "metrics.jsonl", "config.toml", "last.pt"}) {
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(r.run_dir) / f)) << f;
  }
  std::ifstream csv(std::filesystem::path(r.run_dir) / "metrics.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_NE(header.find("gpu_idle"), std::string::npos);
  EXPECT_NE(row.find(",,pageable,"), std::string::npos) << row;  // GPU idle on CPU: empty, not zero

  const engine::Checkpoint ck = engine::load_checkpoint((std::filesystem::path(r.run_dir) / "last.pt").string());
  EXPECT_EQ(ck.epoch, 4);
}

// A learning rate that blows the weights up: the run stops with Diverged and last.pt keeps the last good epoch.
TEST(Train, DivergenceStopsTheRunAndKeepsTheLastGoodCheckpoint) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_diverge", 2, 16, 2, 32);
  const std::string runs = test::fresh_dir("train_diverge_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const std::string last = (std::filesystem::path(first.run_dir) / "last.pt").string();
  const auto written = std::filesystem::last_write_time(last);
  Config wild = tiny_config(root, runs, 3);
  wild.schedule.lr = 1e30;
  const std::string message = test::message_of<Diverged>([&] { train(resolve_plan(wild), {"last"}, stop); });
  EXPECT_NE(message.find("is no longer finite at epoch 2"), std::string::npos) << message;
  EXPECT_EQ(std::filesystem::last_write_time(last), written);
  EXPECT_EQ(engine::load_checkpoint(last).epoch, 1);
}

// Weights can stay finite while the loss explodes (lr 10 on the quickstart data: 2.2e8 after 8 epochs): the loss
// itself says the run diverged past 1000 x ln(classes); not finite counts too, except in fp16 where the loss
// scaler skips an overflowed step.
TEST(Train, AnExplodingLossIsDivergenceToo) {
  EXPECT_FALSE(loss_diverged(2.3, 10, false));
  EXPECT_FALSE(loss_diverged(2000, 10, false));  // 1000 x ln(10) = 2302.6
  EXPECT_TRUE(loss_diverged(2400, 10, false));
  EXPECT_TRUE(loss_diverged(2.2e8, 1000, true));
  EXPECT_TRUE(loss_diverged(NAN, 10, false));
  EXPECT_TRUE(loss_diverged(INFINITY, 10, false));
  EXPECT_FALSE(loss_diverged(NAN, 10, true));
  EXPECT_FALSE(loss_diverged(INFINITY, 10, true));
  EXPECT_FALSE(loss_diverged(600, 1, false));  // one class: ln(2) stands in for ln(1) = 0
}

// The epoch's first steps time cuDNN's plans and the graph's capture: no rate or ETA from them.
TEST(Train, ProgressLineSaysWarmingUpUntilTheRateIsMeasured) {
  const Plan plan = resolve_plan(tiny_config("/unused", "/unused", 2));
  EpochProgress p;
  p.step = 1, p.lr = 0.01;
  const std::string warming = progress_line(plan, 0, p, 10, NAN, 2.3);
  EXPECT_NE(warming.find("epoch 1/2 step 1/10 | warming up |"), std::string::npos) << warming;
  EXPECT_NE(warming.find("ETA after the warm-up"), std::string::npos) << warming;
  p.step = 5;
  const std::string measured = progress_line(plan, 0, p, 10, 160, 2.3);  // 15 steps of 16 left at 160 samples/s
  EXPECT_NE(measured.find("| 160 samples/s |"), std::string::npos) << measured;
  EXPECT_NE(measured.find("ETA 0m1s"), std::string::npos) << measured;
}

TEST(Train, ResumeContinuesFromTheCheckpoint) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_resume", 2, 16, 2, 32);
  const std::string runs = test::fresh_dir("train_resume_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const TrainResult resumed = train(resolve_plan(tiny_config(root, runs, 2)), {"last"}, stop);
  EXPECT_EQ(resumed.run_dir, first.run_dir);
  ASSERT_EQ(resumed.epochs.size(), 1u);
  EXPECT_EQ(resumed.epochs[0].epoch, 2);
}

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<int64_t> epochs_in_jsonl(const fs::path& file) {
  std::vector<int64_t> epochs;
  for (const std::string& line : lines_of(file)) epochs.push_back(nlohmann::json::parse(line).at("epoch").get<int64_t>());
  return epochs;
}

std::string resume_error(const Config& config) {
  engine::StopRequest stop;
  try {
    train(resolve_plan(config), {"last"}, stop);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ConfigError";
  return "";
}

TEST(Train, ResumeRefusesAChangedBatchSizeNamingBothValues) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_resume_batch", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_resume_batch_runs");
  train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  Config changed = tiny_config(root, runs, 2);
  apply_override(changed, "train.batch_size=8");
  const std::string error = resume_error(changed);
  EXPECT_NE(error.find("train.batch_size = 16, this run has 8"), std::string::npos) << error;
}

TEST(Train, ResumeRefusesAChangedDatasetSizeNamingBothValues) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_resume_data", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_resume_data_runs");
  train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const fs::path one = fs::directory_iterator(*fs::directory_iterator(fs::path(root) / "train"))->path();
  fs::copy_file(one, one.parent_path() / ("added" + one.extension().string()));
  const std::string error = resume_error(tiny_config(root, runs, 2));
  EXPECT_NE(error.find("16 training images, the training folder now has 17"), std::string::npos) << error;
}

TEST(Train, ResumeRefusesRenamedClassFoldersNamingTheFirstThatDiffers) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_resume_classes", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_resume_classes_runs");
  train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  for (const char* split : {"train", "val"}) {  // the same images under another name: the count alone agrees
    fs::rename(fs::path(root) / split / "class_001", fs::path(root) / split / "renamed");
  }
  const std::string error = resume_error(tiny_config(root, runs, 2));
  EXPECT_NE(error.find("class 1 = 'class_001', the training folder's class 1 is 'renamed'"), std::string::npos)
      << error;
}

// Another optimizer's state would not carry over: the resume says which optimizer the checkpoint needs.
TEST(Train, ResumeRefusesAnotherOptimizerNamingBoth) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_resume_optimizer", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_resume_optimizer_runs");
  train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  Config changed = tiny_config(root, runs, 2);
  apply_override(changed, "train.optimizer=\"lamb\"");
  const std::string error = resume_error(changed);
  EXPECT_NE(error.find("trained with train.optimizer = \"sgd\", this run has \"lamb\""), std::string::npos) << error;
}

// A name the network has not is said as that, before the optimizer state that cannot have an entry for it, whether
// the run resumes from the checkpoint or starts from its weights (as a state dict's is).
TEST(Train, ACheckpointWithAWeightTheModelHasNotIsRefusedNamingIt) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_extra_weight", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_extra_weight_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const std::string last = (fs::path(first.run_dir) / "last.pt").string();
  engine::Checkpoint ck = engine::load_checkpoint(last);
  ASSERT_FALSE(ck.optimizer.empty());  // momentum buffers, none for the extra weight
  ck.model["extra.weight"] = at::zeros({3});
  engine::save_checkpoint(last, ck);
  const std::string resumed = resume_error(tiny_config(root, runs, 2));
  EXPECT_NE(resumed.find("not the weights of this resnet18: it has extra.weight, which the model has not"),
            std::string::npos) << resumed;
  Config init = tiny_config(root, test::fresh_dir("train_extra_weight_init"), 1);
  apply_override(init, "train.init_from=\"" + last + "\"");
  const std::string started = test::message_of<ConfigError>([&] { train(resolve_plan(init), {}, stop); });
  EXPECT_NE(started.find("it has extra.weight, which the model has not"), std::string::npos) << started;
}

TEST(Train, BadImagesTsvListsACorruptFileOnceWithItsReason) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_bad_tsv", 2, 8, 1, 32);
  const fs::path bad = fs::directory_iterator(*fs::directory_iterator(fs::path(root) / "train"))->path();
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << "not an image\tat all";
  const TrainResult r = train(resolve_plan(tiny_config(root, test::fresh_dir("train_bad_tsv_runs"), 3)), {}, stop);
  ASSERT_EQ(r.epochs.size(), 3u);
  const std::vector<std::string> rows = lines_of(fs::path(r.run_dir) / "bad_images.tsv");
  ASSERT_EQ(rows.size(), 2u) << "a header and one row, across 3 epochs";
  EXPECT_EQ(rows[0], "path\treason");
  const size_t tab = rows[1].find('\t');
  ASSERT_NE(tab, std::string::npos);
  EXPECT_EQ(rows[1].substr(0, tab), bad.string());
  EXPECT_GT(rows[1].size(), tab + 1) << "a reason";
  EXPECT_EQ(rows[1].find('\t', tab + 1), std::string::npos) << "tabs in the reason are escaped";
  for (const std::string& line : lines_of(fs::path(r.run_dir) / "metrics.jsonl")) {
    EXPECT_EQ(nlohmann::json::parse(line).at("bad_images"), 1) << "distinct files, not loads: " << line;
  }
}

// The trainer's rows carry exactly the metrics that app/run/metrics.h names and explains, in no other name.
TEST(Train, EpochRowsCarryExactlyTheNamedMetrics) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_metric_names", 2, 8, 1, 32);
  const TrainResult r = train(resolve_plan(tiny_config(root, test::fresh_dir("train_metric_names_runs"), 1)), {}, stop);
  std::set<std::string> named, written;
  for (const Metric& m : kEpochMetrics) named.insert(m.name);
  const nlohmann::json row = nlohmann::json::parse(lines_of(fs::path(r.run_dir) / "metrics.jsonl").at(0));
  for (const auto& item : row.items()) written.insert(item.key());
  EXPECT_EQ(written, named);
  EXPECT_EQ(named.size(), std::size(kEpochMetrics)) << "a name listed twice";
}

TEST(Train, ResumeRemovesAStaleCheckpointTempFile) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_stale_tmp", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_stale_tmp_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const fs::path tmp = fs::path(first.run_dir) / "last.pt.tmp";  // what kill -9 during a save leaves
  std::ofstream(tmp) << "half a checkpoint";
  train(resolve_plan(tiny_config(root, runs, 2)), {"last"}, stop);
  EXPECT_FALSE(fs::exists(tmp));
}

TEST(Train, ResumeFromACheckpointOlderThanTheMetricsDoesNotRepeatRows) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_older_ck", 2, 8, 1, 32);
  const std::string runs = test::fresh_dir("train_older_ck_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const fs::path dir = first.run_dir;
  fs::copy_file(dir / "last.pt", dir / "epoch1.pt");
  train(resolve_plan(tiny_config(root, runs, 2)), {"last"}, stop);  // metrics now one epoch ahead of epoch1.pt
  ASSERT_EQ(epochs_in_jsonl(dir / "metrics.jsonl"), (std::vector<int64_t>{1, 2}));
  const TrainResult resumed = train(resolve_plan(tiny_config(root, runs, 3)), {(dir / "epoch1.pt").string()}, stop);
  ASSERT_EQ(resumed.epochs.size(), 2u);
  EXPECT_EQ(epochs_in_jsonl(dir / "metrics.jsonl"), (std::vector<int64_t>{1, 2, 3}));
  const std::vector<std::string> csv = lines_of(dir / "metrics.csv");
  ASSERT_EQ(csv.size(), 4u) << "a header and epochs 1, 2, 3";
  for (int e = 1; e <= 3; ++e) EXPECT_EQ(csv[e].substr(0, csv[e].find(',')), std::to_string(e));
}

// last.pt.tmp as a folder makes last.pt impossible to write, as a full disk or a folder pinfeed may not write
// would. The epoch's checkpoint is written while the next epoch trains; its error still ends the run as an
// OutputError (exit code 4), at the end of the run or at a stop, and last.pt keeps the epoch before.
TEST(Train, ACheckpointThatCannotBeWrittenEndsTheRunWithOutputError) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_unwritable", 2, 16, 1, 32);  // 32 images: 2 steps of 16
  const std::string runs = test::fresh_dir("train_unwritable_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {}, stop);
  const fs::path last = fs::path(first.run_dir) / "last.pt";
  fs::create_directory(fs::path(first.run_dir) / "last.pt.tmp");
  const std::string at_end =
      test::message_of<engine::OutputError>([&] { train(resolve_plan(tiny_config(root, runs, 2)), {"last"}, stop); });
  EXPECT_NE(at_end.find("cannot create " + (last.string() + ".tmp")), std::string::npos) << at_end;
  EXPECT_EQ(engine::load_checkpoint(last.string()).epoch, 1);
  // Stopped (as by Ctrl-C) one step into epoch 3, after epoch 2's last.pt failed.
  const std::string at_stop = test::message_of<engine::OutputError>(
      [&] { train(resolve_plan(tiny_config(root, runs, 3)), {"last", /*stop_after_steps=*/3}, stop); });
  EXPECT_NE(at_stop.find("cannot create " + (last.string() + ".tmp")), std::string::npos) << at_stop;
  EXPECT_EQ(engine::load_checkpoint(last.string()).epoch, 1);
}

TEST(Train, AStopBeforeTheFirstStepSavesNothing) {
  const std::string root = test::make_dataset("train_stop_early", 2, 8, 1, 32);
  engine::StopRequest stop;
  stop.request();  // as a Ctrl-C between the start of the loop and the first step
  const TrainResult r = train(resolve_plan(tiny_config(root, test::fresh_dir("train_stop_early_runs"), 1)), {}, stop);
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(fs::exists(fs::path(r.run_dir) / "last.pt"));
}

// A sample that never finishes loading (a read that never returns) ends the run naming its file, with the steps
// already run saved: last.pt at the step the input stopped, and the epoch before it still complete in metrics.
TEST(Train, AStuckSampleEndsTheRunWithTheStepsSoFarSaved) {
  const std::string root = test::make_dataset("train_stuck", 2, 24, 1, 32);  // 48 images: 3 steps of 16
  Plan plan = resolve_plan(tiny_config(root, test::fresh_dir("train_stuck_runs"), 2));
  plan.train_loader.sample_timeout_s = 0.5;
  // Shared with the worker, which is left running (detached) when the run ends and may wake after this test.
  struct Gate {
    std::mutex mutex;
    std::condition_variable released;
    bool open = false;
    int loads = 0;
  };
  auto gate = std::make_shared<Gate>();
  // The 89th sample loaded: in the second epoch's third batch (48 + 2 x 16 < 89 <= 48 + 3 x 16).
  plan.train_loader.before_load = [gate](int64_t) {
    std::unique_lock<std::mutex> lock(gate->mutex);
    if (++gate->loads == 89) gate->released.wait(lock, [&] { return gate->open; });
  };
  engine::StopRequest stop;
  const std::string message = test::message_of<data::StuckSample>([&] { train(plan, {}, stop); });
  {
    std::lock_guard<std::mutex> lock(gate->mutex);
    gate->open = true;
  }
  gate->released.notify_all();
  EXPECT_NE(message.find("data.sample_timeout_s = 0.5"), std::string::npos) << message;
  fs::path run;
  for (const auto& e : fs::directory_iterator(plan.run.dir)) run = e.path();
  const engine::Checkpoint ck = engine::load_checkpoint((run / "last.pt").string());
  EXPECT_EQ(ck.epoch, 1);  // in the second epoch (0-based), after the 2 steps its input allowed
  EXPECT_EQ(ck.step_in_epoch, 2);
}

// Eager step on the CPU: a run stopped as by Ctrl-C after each of `stops` steps (of that process) and resumed
// each time ends with exactly the weights, BN statistics and momentum of the run that was never stopped, and
// its metric rows have the same lr, training loss (the epoch's whole, across the resume) and validation
// figures. Every draw is seeded by (seed, epoch, index), the CPU kernels are deterministic for a given thread
// count, and the checkpoint carries the epoch's loss so far. One training file is corrupt: its replacement is
// drawn alike, and the bad-file count goes on across the resume.
void expect_resumed_run_equals_the_uninterrupted_one(const std::string& name, const std::vector<int64_t>& stops,
                                                     const std::vector<std::string>& overrides = {}) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset(name, 2, 40, 2, 32);  // 80 images: 5 steps an epoch
  const fs::path bad = fs::directory_iterator(*fs::directory_iterator(fs::path(root) / "train"))->path();
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << "not an image";
  const std::string runs = test::fresh_dir(name + "_runs");
  Config whole = tiny_config(root, runs, 2);
  apply_override(whole, "run.log_steps=true");
  for (const auto& o : overrides) apply_override(whole, o);
  Config split = whole;
  apply_override(whole, "run.name=\"whole\"");
  apply_override(split, "run.name=\"split\"");
  const TrainResult a = train(resolve_plan(whole), {}, stop);
  std::string resume;
  for (const int64_t steps : stops) {
    engine::StopRequest stop_after;  // requested by the run itself, after `steps` steps
    const TrainResult stopped = train(resolve_plan(split), {resume, steps}, stop_after);
    ASSERT_TRUE(stopped.interrupted) << "after " << steps << " steps";
    resume = "last";
  }
  const TrainResult b = train(resolve_plan(split), {"last"}, stop);
  ASSERT_FALSE(b.interrupted);
  const engine::Checkpoint ca = engine::load_checkpoint((fs::path(a.run_dir) / "last.pt").string());
  const engine::Checkpoint cb = engine::load_checkpoint((fs::path(b.run_dir) / "last.pt").string());
  ASSERT_EQ(ca.model.size(), cb.model.size());
  for (const auto& [name, t] : ca.model) {
    const at::Tensor& u = cb.model.at(name);
    EXPECT_TRUE(t.equal(u)) << name << " differs by " << (t - u).abs().max().item<double>();
  }
  ASSERT_EQ(ca.optimizer.size(), cb.optimizer.size());
  for (const auto& [name, t] : ca.optimizer) EXPECT_TRUE(t.equal(cb.optimizer.at(name))) << "optimizer " << name;
  ASSERT_EQ(ca.model_ema.size(), cb.model_ema.size());
  for (const auto& [name, t] : ca.model_ema) EXPECT_TRUE(t.equal(cb.model_ema.at(name))) << "model_ema " << name;
  EXPECT_EQ(ca.ema_updates, cb.ema_updates);
  EXPECT_EQ(ca.optimizer_name, cb.optimizer_name);
  EXPECT_EQ(ca.global_step, cb.global_step);
  EXPECT_EQ(test::learning_rows(fs::path(b.run_dir) / "metrics.jsonl"),
            test::learning_rows(fs::path(a.run_dir) / "metrics.jsonl"));
  // steps.jsonl: every step once, numbered as in the uninterrupted run (a resumed epoch goes on from its step).
  auto step_numbers = [](const fs::path& file) {
    std::vector<std::pair<int64_t, int64_t>> out;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      const auto row = nlohmann::json::parse(line);
      out.emplace_back(row.at("epoch").get<int64_t>(), row.at("step").get<int64_t>());
    }
    return out;
  };
  const auto want = step_numbers(fs::path(a.run_dir) / "steps.jsonl");
  EXPECT_EQ(want.size(), 10u);
  EXPECT_EQ(step_numbers(fs::path(b.run_dir) / "steps.jsonl"), want);
}

TEST(Train, ResumeMidEpochEqualsTheUninterruptedRunBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one("train_exact_mid", {3});
}

// The augmentations' draws replay on resume: each batch's are keyed by (train.seed, epoch, batch), not by what ran.
TEST(Train, ResumeMidEpochWithAugmentationsEqualsTheUninterruptedRunBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one("train_exact_augment", {3},
                                                  {"data.auto_augment=\"trivial\"", "data.random_erasing=0.5",
                                                   "data.mixup_alpha=0.8", "data.cutmix_alpha=1.0",
                                                   "train.label_smoothing=0.1"});
}

// Stopped after epoch 1's last step, before its evaluation (the resumed run runs no step of that epoch, then
// evaluates and reports it as the uninterrupted run did), then again mid-epoch 2, resumed each time.
TEST(Train, ResumeAtAnEpochBoundaryThenMidEpochEqualsTheUninterruptedRunBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one("train_exact_boundary", {5, 3});
}

// train.accumulate_steps 2 over 5 batches an epoch (the epoch's last optimizer step takes one), with the EMA: a
// stop asked for after 3 batches acts after the 4th (between optimizer steps), and the resumed run ends as the
// uninterrupted one.
TEST(Train, AStopInsideAnAccumulationWaitsForItsStepAndResumesBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one("train_exact_accumulate", {3},
                                                  {"train.accumulate_steps=2", "train.ema=true"});
}

// Plain SGD (momentum 0) keeps no momentum buffers: it trains, saves and resumes as the rest does.
TEST(Train, PlainSgdWithoutMomentumResumesBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one("train_exact_plain_sgd", {3}, {"train.momentum=0"});
}

// A resolution schedule: epoch 1 at 24 px, epoch 2 at 32, stopped mid-epoch 2 and resumed there.
TEST(Train, ResumeMidScheduleEqualsTheUninterruptedRunBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one("train_exact_schedule", {7},
                                                  {"data.image_size_by_epoch=\"24, 32\"", "data.val_image_size=32"});
  std::vector<int64_t> sides;
  const fs::path runs = fs::path(::testing::TempDir()) / ("pinfeed_train_exact_schedule_runs_" + std::to_string(::getpid()));
  for (const auto& e : fs::directory_iterator(runs)) {
    std::ifstream metrics(e.path() / "metrics.jsonl");
    sides.clear();
    for (std::string line; std::getline(metrics, line);) sides.push_back(nlohmann::json::parse(line).at("image_size"));
    EXPECT_EQ(sides, (std::vector<int64_t>{24, 32})) << e.path();
  }
}

// LARS (MLPerf's, with its poly schedule) and LAMB, each with the EMA of the weights: the optimizer's state
// (LAMB's moments and step count), the EMA's tensors and update count, and its evaluations resume exactly.
TEST(Train, LarsWithThePolyScheduleAndEmaResumesBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one(
      "train_exact_lars", {3},
      {"train.optimizer=\"lars\"", "train.lr_schedule=\"poly\"", "train.warmup_epochs=0.5", "train.lr=0.5",
       "train.weight_decay=5e-5", "train.decay_bn_and_bias=false", "train.ema=true", "train.ema_decay=0.5"});
}

TEST(Train, LambWithEmaResumesBitForBit) {
  expect_resumed_run_equals_the_uninterrupted_one(
      "train_exact_lamb", {7},
      {"train.optimizer=\"lamb\"", "train.weight_decay=0.01", "train.ema=true", "train.ema_warmup=true"});
}

// With train.ema each epoch evaluates both weights; best.pt holds the better (the EMA's in `model` when it won,
// the raw ones then in model_raw) and says which, as the epoch's row does.
TEST(Train, EmaIsEvaluatedBesideTheWeightsAndBestPtTakesTheBetter) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("train_ema_best", 2, 16, 4, 32);
  Config c = tiny_config(root, test::fresh_dir("train_ema_best_runs"), 2);
  apply_override(c, "train.ema=true");
  apply_override(c, "train.ema_decay=0.7");
  const TrainResult r = train(resolve_plan(c), {}, stop);
  ASSERT_EQ(r.epochs.size(), 2u);
  double best = -1;
  std::string best_weights;
  for (const EpochResult& e : r.epochs) {
    EXPECT_FALSE(std::isnan(e.ema_val_top1)) << "epoch " << e.epoch;
    EXPECT_FALSE(std::isnan(e.ema_val_loss)) << "epoch " << e.epoch;
    const double better = std::max(e.val_top1, e.ema_val_top1);
    if (better > best) {
      best = better;
      best_weights = e.ema_val_top1 > e.val_top1 ? "ema" : "raw";
      EXPECT_EQ(e.best_weights, best_weights) << "epoch " << e.epoch;
    } else {
      EXPECT_EQ(e.best_weights, "") << "epoch " << e.epoch;
    }
  }
  const engine::Checkpoint ck = engine::load_checkpoint((fs::path(r.run_dir) / "best.pt").string());
  EXPECT_EQ(ck.best_val_top1, best);
  EXPECT_EQ(ck.best_weights, best_weights);
  ASSERT_FALSE(ck.model_ema.empty());
  const auto same = [](const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [n, t] : a) {
      if (!t.equal(b.at(n))) return false;
    }
    return true;
  };
  if (best_weights == "ema") {
    EXPECT_TRUE(same(ck.model, ck.model_ema));
    EXPECT_EQ(ck.model_raw.size(), ck.model.size());
  } else {
    EXPECT_TRUE(ck.model_raw.empty());
  }
  const engine::Checkpoint last = engine::load_checkpoint((fs::path(r.run_dir) / "last.pt").string());
  EXPECT_EQ(last.ema_updates, last.global_step);
  EXPECT_FALSE(same(last.model, last.model_ema)) << "an average of several steps' weights";
  EXPECT_TRUE(last.model_raw.empty());
}

// Which weights make best.pt: whole evaluations only, the EMA's when strictly better, and only past the best so far.
TEST(Train, BestWeightsAreTheBetterWholeEvaluation) {
  EvalResult raw{1.0, 0.5, 0.9, 100}, ema{1.0, 0.6, 0.9, 100}, cut{1.0, 0.9, 0.9, 40}, none;
  EXPECT_EQ(best_weights(raw, ema, 100, NAN).weights, "ema");
  EXPECT_EQ(best_weights(raw, ema, 100, NAN).top1, 0.6);
  EXPECT_EQ(best_weights(raw, raw, 100, NAN).weights, "raw") << "a tie keeps the raw weights";
  EXPECT_EQ(best_weights(raw, none, 100, NAN).weights, "raw");
  EXPECT_EQ(best_weights(raw, cut, 100, NAN).weights, "raw") << "a stop cut the EMA's short";
  EXPECT_EQ(best_weights(raw, ema, 100, 0.6).weights, "") << "no better than before";
  EXPECT_EQ(best_weights(cut, none, 100, NAN).weights, "");
}

// train.eval_flip: evaluation scores the mean of the logits of each image and of its horizontal mirror (FFCV's
// lr_tta), for the raw weights and the EMA's alike.
TEST(Train, EvalFlipScoresTheMeanLogitsOfTheImageAndItsMirror) {
  engine::StepOptions o;
  o.precision = engine::Precision::kFp32;
  o.net.zero_init_residual = false;
  o.ema.enabled = true;
  engine::StepRunner plain(o, 5);
  o.eval_flip = true;
  engine::StepRunner flip(o, 5);  // the same seed: the same weights
  at::manual_seed(2);
  const at::Tensor images = at::randn({6, 3, 32, 32}), labels = at::randint(5, {6});
  for (const bool ema : {false, true}) {
    SCOPED_TRACE(ema ? "ema" : "raw");
    model::ResNet& net = ema ? plain.ema_model() : plain.model();
    net->eval();
    (ema ? flip.ema_model() : flip.model())->eval();
    at::Tensor logits, mean;
    {
      at::NoGradGuard no_grad;
      logits = net->forward(images);
      mean = (logits + net->forward(images.flip(3))) / 2;
    }
    ASSERT_GT((mean - logits).abs().max().item<double>(), 1e-3 * logits.abs().max().item<double>())
        << "the mirror must change the logits, or the test proves nothing";
    const auto sums_of = [&](engine::StepRunner& r) {
      at::Tensor sums = at::zeros({4}, at::kDouble);
      r.eval_step(images, labels, sums, ema);
      return sums;
    };
    const auto expected = [&](const at::Tensor& l) {
      const double loss = at::cross_entropy_loss(l, labels, {}, at::Reduction::Sum).item<double>();
      const double top1 = l.argmax(1).eq(labels).sum().item<double>();
      return std::pair{loss, top1};
    };
    const at::Tensor with = sums_of(flip), without = sums_of(plain);
    EXPECT_NEAR(with[0].item<double>(), expected(mean).first, 1e-5 * std::abs(expected(mean).first));
    EXPECT_EQ(with[1].item<double>(), expected(mean).second);
    EXPECT_EQ(with[3].item<double>(), 6);
    EXPECT_NEAR(without[0].item<double>(), expected(logits).first, 1e-5 * std::abs(expected(logits).first));
  }
}

// NVIDIA's MLPerf PolySchedule (iterations from 1): lr it / warmup through the warm-up, then
// end + (lr - end) (1 - (it - warmup) / (total - warmup))^2, end at the last step.
TEST(Train, PolyScheduleIsMlperfs) {
  engine::LrSchedule t;
  t.shape = engine::LrShape::kPoly;
  t.lr = 11.0;
  t.min_lr = 1e-4;
  t.epochs = 10;
  t.warmup_epochs = 2;
  EXPECT_NEAR(engine::learning_rate(t, 0, 10), 11.0 / 20, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 19, 10), 11.0, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 20, 10), 1e-4 + (11.0 - 1e-4) * std::pow(1 - 1.0 / 80, 2), 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 59, 10), 1e-4 + (11.0 - 1e-4) * 0.25, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 99, 10), 1e-4, 1e-12);
  t.poly_power = 1, t.warmup_epochs = 0, t.batch_scale = 2;
  EXPECT_NEAR(engine::learning_rate(t, 49, 10), 2e-4 + (22.0 - 2e-4) * 0.5, 1e-12);
}

TEST(Train, LearningRateWarmsUpThenFollowsCosine) {
  engine::LrSchedule t;
  t.lr = 1.0;
  t.epochs = 10;
  t.warmup_epochs = 1;
  EXPECT_NEAR(engine::learning_rate(t, 0, 10), 0.1, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 9, 10), 1.0, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 10, 10), 1.0, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 55, 10), 0.5, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 100, 10), 0.0, 1e-12);
}

// FFCV's train_imagenet.py: get_cyclic_lr(e) = np.interp(e, [0, lr_peak_epoch, epochs], [1e-4 lr, lr, 0]) and,
// within epoch e, np.interp(step, [0, iters], [get_lr(e), get_lr(e + 1)]); rn50_16_epochs.yaml: lr 1.7, peak 2.
TEST(Train, TriangularScheduleIsFfcvsCyclic) {
  engine::LrSchedule t;
  t.shape = engine::LrShape::kTriangular;
  t.lr = 1.7;
  t.epochs = 16;
  t.warmup_epochs = 2;
  const double e1 = 1.7e-4 + (1.7 - 1.7e-4) / 2, e3 = 1.7 - 1.7 / 14, e15 = 1.7 / 14;
  EXPECT_NEAR(engine::learning_rate(t, 0, 10), 1.7e-4, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 5, 10), 1.7e-4 + (e1 - 1.7e-4) * 0.5, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 10, 10), e1, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 20, 10), 1.7, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 25, 10), 1.7 + (e3 - 1.7) * 0.5, 1e-12);
  EXPECT_NEAR(engine::learning_rate(t, 159, 10), e15 * 0.1, 1e-12);
  t.min_lr = 0.01, t.batch_scale = 2;  // min_lr is the end point, both scaled to the global batch
  EXPECT_NEAR(engine::learning_rate(t, 160, 10), 0.02, 1e-12);
  t.warmup_epochs = 0;  // no ramp: lr at the first step
  EXPECT_NEAR(engine::learning_rate(t, 0, 10), 3.4, 1e-12);
}

}  // namespace
}  // namespace pinfeed::app

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "app/checkpoint.h"
#include "app/lr_schedule.h"
#include "app/trainer.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

Config tiny_config(const std::string& root, const std::string& runs, int epochs) {
  return parse_config_string("[data]\nimage_size = 32\nworkers = 2\n[train]\ndevice = \"cpu\"\nbatch_size = 16\n"
                             "lr = 0.01\nwarmup_epochs = 0\nweight_decay = 0\nprecision = \"fp32\"\n"
                             "[pipeline]\nwarmup_steps = 1\n[run]\nname = \"t\"\n",
                             "tiny.toml",
                             {"data.root=\"" + root + "\"", "run.dir=\"" + runs + "\"",
                              "train.epochs=" + std::to_string(epochs)});
}

TEST(Train, ShortCpuRunLowersTheLossAndWritesItsRun) {
  const std::string root = test::make_dataset("train_small", 2, 24, 4, 32);
  const std::string runs = test::fresh_dir("train_runs");
  const TrainResult r = train(resolve_plan(tiny_config(root, runs, 4)), {});
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

  const Checkpoint ck = load_checkpoint((std::filesystem::path(r.run_dir) / "last.pt").string());
  EXPECT_EQ(ck.epoch, 4);
}

TEST(Train, ResumeContinuesFromTheCheckpoint) {
  const std::string root = test::make_dataset("train_resume", 2, 16, 2, 32);
  const std::string runs = test::fresh_dir("train_resume_runs");
  const TrainResult first = train(resolve_plan(tiny_config(root, runs, 1)), {});
  const TrainResult resumed = train(resolve_plan(tiny_config(root, runs, 2)), {"last"});
  EXPECT_EQ(resumed.run_dir, first.run_dir);
  ASSERT_EQ(resumed.epochs.size(), 1u);
  EXPECT_EQ(resumed.epochs[0].epoch, 2);
}

TEST(Train, LearningRateWarmsUpThenFollowsCosine) {
  TrainConfig t;
  t.lr = 1.0;
  t.epochs = 10;
  t.warmup_epochs = 1;
  EXPECT_NEAR(learning_rate(t, 0, 10), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(t, 9, 10), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(t, 10, 10), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(t, 55, 10), 0.5, 1e-12);
  EXPECT_NEAR(learning_rate(t, 100, 10), 0.0, 1e-12);
}

TEST(Train, PinnedMemoryOnCpuIsRefusedNamingTheFlag) {
  const std::string root = test::make_dataset("train_refuse", 2, 4, 1, 32);
  Config c = tiny_config(root, test::fresh_dir("train_refuse_runs"), 1);
  apply_override(c, "pipeline.pin_memory=true");
  try {
    train(resolve_plan(c), {});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.pin_memory = true needs a CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pinfeed::app

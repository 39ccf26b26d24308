// The run folder through the pinfeed executable: one process writes a folder at a time (a second exits 2 naming
// it and the holder), `--resume last` takes the run of exactly that run.name and says when it has nothing left to
// do, a checkpoint outside a pinfeed run folder is refused without touching that folder, every start leaves
// run.json, run.log and its own config, `--resume PATH` alone takes the run's config, and a finished run ends with
// one `final:` line. Tiny CPU runs on generated data: one step per epoch.
#include <gtest/gtest.h>

#include "run_exe.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;
using pinfeed::test::Outcome;

std::string text_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CliRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("pinfeed_cli_runs_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const Outcome data = pinfeed({"gen-data", "--out", "data", "--classes", "2", "--train-per-class", "4",
                                  "--val-per-class", "1", "--size", "32x32", "--threads", "1"});
    ASSERT_EQ(data.code, 0) << data.output;
    std::ofstream(dir_ / "tiny.toml") << "[data]\nroot = \"data\"\nimage_size = 32\nworkers = 1\n"
                                         "[train]\ndevice = \"cpu\"\nbatch_size = 8\nprecision = \"fp32\"\n"
                                         "epochs = 1\neval = false\n[model]\narch = \"resnet18\"\n[pipeline]\nwarmup_steps = 0\n"
                                         "[run]\nname = \"quick\"\nlog_steps = true\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome pinfeed(const std::vector<std::string>& args) { return pinfeed::test::run_exe(PINFEED_EXE, dir_.string(), args); }

  Outcome train(std::vector<std::string> args) {
    args.insert(args.begin(), {"train", "-c", "tiny.toml"});
    return pinfeed(args);
  }

  // The one run folder under runs/ whose name ends in `suffix`.
  fs::path run_folder(const std::string& suffix) {
    fs::path found;
    for (const auto& e : fs::directory_iterator(dir_ / "runs")) {
      const std::string name = e.path().filename().string();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        EXPECT_TRUE(found.empty()) << "two folders end in " << suffix;
        found = e.path();
      }
    }
    return found;
  }

  fs::path dir_;
};

TEST_F(CliRuns, ASecondWriterOfARunFolderExitsTwoNamingItAndTheHolder) {
  ASSERT_EQ(train({}).code, 0);
  const fs::path run = run_folder("-quick");
  // The test holds the folder's lock as a running pinfeed would (flock, with its pid in the file).
  const int fd = ::open((run / "run.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string pid = std::to_string(::getpid()) + "\n";
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ASSERT_EQ(::pwrite(fd, pid.data(), pid.size(), 0), static_cast<ssize_t>(pid.size()));
  const std::string metrics_before = text_of(run / "metrics.jsonl");
  const Outcome second = train({"--resume", (run / "last.pt").string(), "train.epochs=2"});
  EXPECT_EQ(second.code, 2) << second.output;
  EXPECT_NE(second.output.find("error: run folder " + run.string() + " is in use by another pinfeed process (pid " +
                               std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.output;
  EXPECT_EQ(text_of(run / "metrics.jsonl"), metrics_before) << "the refused process wrote nothing";
  ::close(fd);  // the holder ends: the folder is free again
  const Outcome later = train({"--resume", "last", "train.epochs=2"});
  EXPECT_EQ(later.code, 0) << later.output;
}

TEST_F(CliRuns, ResumeLastTakesTheExactRunNameAndSaysWhenItIsFinished) {
  ASSERT_EQ(train({}).code, 0);
  ASSERT_EQ(train({"run.name=other-quick"}).code, 0);  // newer, and its folder name ends in -quick too
  fs::path quick;
  for (const auto& e : fs::directory_iterator(dir_ / "runs")) {
    if (e.path().filename().string().find("other") == std::string::npos) quick = e.path();
  }
  const Outcome r = train({"--resume", "last"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("run " + (fs::path("runs") / quick.filename()).string() +
                          " already finished all 1 epochs (train.epochs = 1); nothing to do"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("other-quick"), std::string::npos) << r.output;
}

TEST_F(CliRuns, AResumeOutsideAPinfeedRunFolderIsRefusedAndTouchesNothingThere) {
  ASSERT_EQ(train({}).code, 0);
  fs::create_directories(dir_ / "elsewhere");
  fs::copy_file(run_folder("-quick") / "last.pt", dir_ / "elsewhere" / "last.pt");
  std::ofstream(dir_ / "elsewhere" / "download.tmp") << "a user's file";
  std::ofstream(dir_ / "elsewhere" / "last.pt.tmp") << "not pinfeed's either: no run here";
  const Outcome r = train({"--resume", "elsewhere/last.pt", "train.epochs=2"});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("error: --resume elsewhere/last.pt: elsewhere is not a pinfeed run folder"),
            std::string::npos)
      << r.output;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_ / "elsewhere")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"download.tmp", "last.pt", "last.pt.tmp"}));
}

TEST_F(CliRuns, AKillBetweenTheTwoSavesLosesNoEpoch) {
  ASSERT_EQ(train({"train.eval=true"}).code, 0);
  const fs::path run = run_folder("-quick");
  // last.pt is written before best.pt: a kill between the two leaves the epoch where a resume looks first.
  EXPECT_LE(fs::last_write_time(run / "last.pt"), fs::last_write_time(run / "best.pt"));
  // A folder left with best.pt alone (or a best.pt ahead of last.pt) resumes from best.pt, the later position.
  fs::remove(run / "last.pt");
  const Outcome r = train({"--resume", "last", "train.epochs=2", "train.eval=true"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + (fs::path("runs") / run.filename() / "best.pt").string() + " at epoch 2"),
            std::string::npos)
      << r.output;
}

TEST_F(CliRuns, ResumeOfARunFolderTakesItsCheckpointAndConfig) {
  ASSERT_EQ(train({}).code, 0);
  const fs::path run = fs::path("runs") / run_folder("-quick").filename();
  const Outcome r = pinfeed({"train", "--resume", run.string(), "train.epochs=2"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("config: " + (run / "config.toml").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resuming from " + (run / "last.pt").string() + " at epoch 2"), std::string::npos)
      << r.output;
}

TEST_F(CliRuns, EachStartIsRecordedWithItsConfigAndLog) {
  ASSERT_EQ(train({}).code, 0);
  const fs::path run = run_folder("-quick");
  std::ofstream(run / "download.tmp") << "a user's file in the run folder";
  const Outcome resumed = train({"--resume", "last", "train.epochs=2"});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(fs::exists(run / "download.tmp")) << "pinfeed removes only the temp files it writes";
  const nlohmann::json record = nlohmann::json::parse(text_of(run / "run.json"));
  EXPECT_EQ(record.at("name"), "quick");
  ASSERT_EQ(record.at("starts").size(), 2u);
  EXPECT_EQ(record["starts"][0].at("config"), "config.toml");
  EXPECT_EQ(record["starts"][1].at("config"), "config.resume-1.toml");
  EXPECT_EQ(record["starts"][1].at("resumed_from").at("epoch"), 2);
  EXPECT_EQ(record["starts"][0].at("command").at(1), "train");
  EXPECT_EQ(record["starts"][0].at("device"), "cpu");
  EXPECT_NE(text_of(run / "config.toml").find("epochs = 1"), std::string::npos) << "the first start's config";
  EXPECT_NE(text_of(run / "config.resume-1.toml").find("epochs = 2"), std::string::npos);
  const std::string log = text_of(run / "run.log");
  EXPECT_NE(log.find("run runs/"), std::string::npos) << log;  // the first start's banner
  EXPECT_NE(log.find("resuming from"), std::string::npos) << log;
  EXPECT_NE(log.find("epoch 2/2 (32 px): train_loss"), std::string::npos) << log;
  // steps.jsonl: epochs from 1, as in metrics.jsonl, each step with its loss and lr.
  std::ifstream steps(run / "steps.jsonl");
  std::vector<int64_t> epochs;
  for (std::string line; std::getline(steps, line);) {
    const nlohmann::json row = nlohmann::json::parse(line);
    epochs.push_back(row.at("epoch"));
    EXPECT_TRUE(row.at("loss").is_number()) << line;
    EXPECT_TRUE(row.at("lr").is_number()) << line;
  }
  EXPECT_EQ(epochs, (std::vector<int64_t>{1, 2}));
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(prefix);  // run.log's lines start with the date and time
    if (at != std::string::npos && (at == 0 || line.compare(0, 2, "20") == 0)) found.push_back(line.substr(at));
  }
  return found;
}

TEST_F(CliRuns, AFinishedRunEndsWithOneFinalLineNamingTheBestEpochAndBestPtAlsoInRunLog) {
  const Outcome r = train({"train.eval=true", "train.epochs=2"});
  ASSERT_EQ(r.code, 0) << r.output;
  const fs::path run = run_folder("-quick");
  int64_t best = 0;  // the last epoch best.pt was written for
  std::ifstream rows(run / "metrics.jsonl");
  for (std::string line; std::getline(rows, line);) {
    const nlohmann::json row = nlohmann::json::parse(line);
    if (row.at("best_weights").is_string()) best = row.at("epoch");
  }
  ASSERT_GT(best, 0);
  const std::string folder = (fs::path("runs") / run.filename()).string();
  for (const std::string& text : {r.output, text_of(run / "run.log")}) {
    const auto finals = lines_starting(text, "final: ");
    ASSERT_EQ(finals.size(), 1u) << text;
    const std::string& line = finals[0];
    EXPECT_EQ(line.rfind("final: epoch 2/2 val_top1 ", 0), 0u) << line;
    EXPECT_NE(line.find("| best: epoch " + std::to_string(best) + ", val_top1 "), std::string::npos) << line;
    EXPECT_NE(line.find("(the raw weights) in " + folder + "/best.pt"), std::string::npos) << line;
    EXPECT_NE(line.find("s | run " + folder), std::string::npos) << line;  // this start's time, then the folder
  }
}

TEST_F(CliRuns, AResumeWithoutAConfigTakesTheRunsLatestConfig) {
  ASSERT_EQ(train({"train.epochs=2", "--stop-after-steps", "1"}).code, 130);
  const fs::path run = run_folder("-quick");
  const std::string last = (fs::path("runs") / run.filename() / "last.pt").string();
  const Outcome resumed = pinfeed({"train", "--resume", last});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("config: " + (fs::path("runs") / run.filename() / "config.toml").string() +
                                ", the run's latest"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("epoch 2/2 (32 px)"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("was trained on"), std::string::npos) << resumed.output;  // the same data.root
  EXPECT_EQ(lines_starting(resumed.output, "final: ").size(), 1u) << resumed.output;
  // The resume wrote config.resume-1.toml: the next resume takes that one.
  const Outcome again = pinfeed({"train", "--resume", last});
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("config.resume-1.toml, the run's latest"), std::string::npos) << again.output;
  const Outcome none = pinfeed({"train"});
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("error: train: --config is required (or --resume PATH"), std::string::npos) << none.output;
}

TEST_F(CliRuns, AResumeOnAnotherDataRootSaysSoInOneLine) {
  ASSERT_EQ(train({"train.epochs=2", "--stop-after-steps", "1"}).code, 130);
  fs::copy(dir_ / "data", dir_ / "copy", fs::copy_options::recursive);  // the same counts: the resume is allowed
  const std::string last = (fs::path("runs") / run_folder("-quick").filename() / "last.pt").string();
  const Outcome r = train({"--resume", last, "data.root=copy"});
  ASSERT_EQ(r.code, 0) << r.output;
  const auto said = lines_starting(r.output, "warning: override 'data.root=copy'");
  ASSERT_EQ(said.size(), 1u) << r.output;
  EXPECT_NE(said[0].find("data.root = \"copy\", but " + last + " was trained on \"data\": resuming on the former"),
            std::string::npos)
      << said[0];
}

TEST_F(CliRuns, WithoutEvaluationTheEpochLineSaysNothingOfValidation) {
  const Outcome r = train({"train.eval=false"});
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string log = text_of(run_folder("-quick") / "run.log");
  EXPECT_NE(log.find("epoch 1/1 (32 px): train_loss"), std::string::npos) << log;
  EXPECT_EQ(log.find("val_loss"), std::string::npos) << log;
  EXPECT_NE(log.find("start-up took "), std::string::npos) << log;  // once, after the first step
}

// A ramp that starts and ends at one epoch (data.ramp_start = data.ramp_end = 0, the keys' defaults) trains that
// epoch at its smallest side and the next at its largest, on every image: none is found "bad" for want of a
// transform at the new side.
TEST_F(CliRuns, ARampStartingAndEndingAtOneEpochTrainsTheNextAtItsLargestSide) {
  const Outcome r = train({"train.epochs=2", "data.image_size_min=32", "data.image_size_max=64"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 1/2 (32 px)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 2/2 (64 px)"), std::string::npos) << r.output;
  const std::string bad = text_of(run_folder("-quick") / "bad_images.tsv");
  EXPECT_EQ(bad.find(".jpg"), std::string::npos) << bad;
}

}  // namespace

// pinfeed eval, predict and train.init_from through the built executable: the figures they print, and one line with
// a defined exit code for every file that is not a checkpoint. One tiny run trained once serves every test: once per
// process, or once per ctest run where PINFEED_CLI_EVAL_RUN names its folder (the CPU build under ctest: the test
// TheRunEveryTestReads... trains it there, a fixture that ctest runs before the others, which only read it).
// Built twice: on the CPU (label cpu), and with PINFEED_EVAL_DEVICE "cuda" (label gpu; skipped without CUDA).
#include <gtest/gtest.h>

#include "run_exe.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#ifndef PINFEED_EVAL_DEVICE
#define PINFEED_EVAL_DEVICE "cpu"
#endif

namespace {
namespace fs = std::filesystem;
using pinfeed::test::Outcome;

Outcome pinfeed(const std::vector<std::string>& args, bool with_stderr = true) {
  return pinfeed::test::run_exe(PINFEED_EXE, "", args, with_stderr);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class CliEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string pid = std::to_string(::getpid());
    scratch_ = fs::path(::testing::TempDir()) / ("pinfeed_cli_eval_scratch_" + pid);  // what each test writes
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
    const char* shared = std::getenv("PINFEED_CLI_EVAL_RUN");
    shared_ = shared && *shared;
    dir_ = shared_ ? fs::path(shared) : fs::path(::testing::TempDir()) / ("pinfeed_cli_eval_" + pid);
    config_ = (dir_ / "tiny.toml").string();
    if (!shared_) train_the_run();
  }
  static void TearDownTestSuite() {
    fs::remove_all(scratch_);
    if (!shared_) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (shared_ && run_.empty() && !trains_the_shared_run()) {
      std::ifstream stamp(dir_ / "run.txt");  // written once the run has trained
      std::string run;
      std::getline(stamp, run);
      ASSERT_FALSE(run.empty()) << "no trained run in " << dir_ << ": CliEval.TheRunEveryTestReads... trains it";
      run_ = run;
    }
    if (no_device_) GTEST_SKIP() << "no CUDA device";
  }

  static bool trains_the_shared_run() {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return test.rfind("TheRunEveryTestReads", 0) == 0;
  }

  // A 2-class dataset and 2 epochs of training on it, in dir_.
  static void train_the_run() {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const Outcome gen = pinfeed({"gen-data", "--out", (dir_ / "data").string(), "--classes", "2", "--train-per-class",
                                 "8", "--val-per-class", "3", "--size", "40x40", "--threads", "2"});
    ASSERT_EQ(gen.code, 0) << gen.output;
    std::ofstream(config_) << "[data]\nroot = \"" << (dir_ / "data").string()
                           << "\"\nimage_size = 32\nworkers = 2\n[train]\ndevice = \"" PINFEED_EVAL_DEVICE "\"\nepochs = 2\nbatch_size = 4\n"
                              "lr = 0.01\nprecision = \"fp32\"\n[model]\narch = \"resnet18\"\n[pipeline]\nwarmup_steps = 0\n[run]\nname = \"ev\"\n"
                              "dir = \""
                           << (dir_ / "runs").string() << "\"\n";
    trained_ = pinfeed({"train", "-c", config_});
    no_device_ = trained_.code == 2 && trained_.output.find("CUDA") != std::string::npos;
    if (no_device_) return;
    ASSERT_EQ(trained_.code, 0) << trained_.output;
    for (const auto& entry : fs::directory_iterator(dir_ / "runs")) run_ = entry.path();
    std::ofstream(dir_ / "run.txt") << run_.string() << "\n";
  }

  // The run's per-epoch rows.
  static std::vector<nlohmann::json> rows() {
    std::vector<nlohmann::json> out;
    std::ifstream in(run_ / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  static void expect_one_error_line(const Outcome& r, const std::string& said) {
    EXPECT_NE(r.output.find(said), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("INTERNAL ASSERT"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;  // a C++ backtrace
    int errors = 0;
    for (const std::string& line : lines_of(r.output)) errors += line.find("error:") != std::string::npos;
    EXPECT_EQ(errors, 1) << r.output;
  }

  static inline fs::path dir_, run_, scratch_;  // the run's folder (read only), this process's own
  static inline std::string config_;
  static inline Outcome trained_;
  static inline bool shared_ = false;     // dir_ is PINFEED_CLI_EVAL_RUN's
  static inline bool no_device_ = false;  // the gpu build on a machine without CUDA
};

// The run the other tests read: two epochs, each with its row, and both checkpoints.
TEST_F(CliEval, TheRunEveryTestReadsTrainedTwoEpochsAndWroteBothCheckpoints) {
  if (shared_) train_the_run();
  if (no_device_) GTEST_SKIP() << "no CUDA device";
  ASSERT_FALSE(run_.empty());
  EXPECT_EQ(rows().size(), 2u);
  EXPECT_TRUE(fs::exists(run_ / "last.pt"));
  EXPECT_TRUE(fs::exists(run_ / "best.pt"));
}

TEST_F(CliEval, EvalOfTheLastCheckpointRepeatsTheLastEpochsValidation) {
  const Outcome r = pinfeed({"eval", "-c", config_, "--checkpoint", (run_ / "last.pt").string(), "--json"}, false);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json got = nlohmann::json::parse(r.output);
  const nlohmann::json last = rows().back();
  EXPECT_EQ(got.at("images"), 6);
  EXPECT_DOUBLE_EQ(got.at("top1").get<double>(), last.at("val_top1").get<double>());
  EXPECT_DOUBLE_EQ(got.at("top5").get<double>(), last.at("val_top5").get<double>());
  EXPECT_NEAR(got.at("loss").get<double>(), last.at("val_loss").get<double>(), 1e-5);

  const Outcome line = pinfeed({"eval", "-c", config_, "--checkpoint", (run_ / "last.pt").string(), "--split", "train"});
  ASSERT_EQ(line.code, 0) << line.output;
  EXPECT_NE(line.output.find("eval: top1 "), std::string::npos) << line.output;
  EXPECT_NE(line.output.find("on 16 images of"), std::string::npos) << line.output;
}

// The README's form with the shipped ImageNet recipe (fp16, dual_stream, batch 256 at 224 px): eval applies
// none of the training step's checks, and evaluates at the side the checkpoint was validated at, saying so.
TEST_F(CliEval, EvalTakesTheImagenetConfigOnAnyDeviceAtTheCheckpointsSide) {
  const std::string imagenet = std::string(PINFEED_SOURCE_DIR) + "/configs/resnet50_imagenet.toml";
  const std::string root = "data.root=\"" + (dir_ / "data").string() + "\"";
  const std::string last = (run_ / "last.pt").string();
  const Outcome r = pinfeed({"eval", "-c", imagenet, "--checkpoint", last, "--device", PINFEED_EVAL_DEVICE, root, "--json"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("evaluating at 32 px, val_resize_ratio 0.875, as " + last + " was validated; the config says "
                          "224 px"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("eval: batch 1/1"), std::string::npos) << r.output;  // the progress line
  // On CUDA the recipe's fp16 would round differently from the fp32 the run was validated in.
  const std::string precision = std::string(PINFEED_EVAL_DEVICE) == "cpu" ? "train.precision=fp16" : "train.precision=fp32";
  const Outcome json = pinfeed({"eval", "-c", imagenet, "--checkpoint", last, "--device", PINFEED_EVAL_DEVICE, root,
                                precision, "--json"}, /*with_stderr=*/false);
  const auto result = nlohmann::json::parse(json.output);
  EXPECT_EQ(result.at("image_size"), 32);
  EXPECT_EQ(result.at("images"), 6);
  EXPECT_NEAR(result.at("top1").get<double>(), rows().back().at("val_top1").get<double>(), 1e-9);
  // A side given on the command line is the one evaluated at, without a word.
  const Outcome at64 = pinfeed({"eval", "-c", imagenet, "--checkpoint", last, "--device", PINFEED_EVAL_DEVICE, root,
                                "data.val_image_size=64", "--json"});
  ASSERT_EQ(at64.code, 0) << at64.output;
  EXPECT_EQ(at64.output.find("evaluating at"), std::string::npos) << at64.output;
  EXPECT_NE(at64.output.find("\"image_size\":64"), std::string::npos) << at64.output;
}

TEST_F(CliEval, EvalBuildsTheNetworkTheCheckpointWasTrainedAs) {
  const std::string last = (run_ / "last.pt").string();
  const Outcome r = pinfeed({"eval", "-c", config_, "--checkpoint", last, "model.blurpool=true", "--json"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("model.blurpool = false, as " + last + " was trained"), std::string::npos) << r.output;
  const std::string json = r.output.substr(r.output.rfind("\n{") + 1);  // the last line: the result
  EXPECT_NEAR(nlohmann::json::parse(json).at("top1").get<double>(), rows().back().at("val_top1").get<double>(), 1e-9);
}

TEST_F(CliEval, BestCheckpointHoldsTheEpochOfTheHighestValidationTop1) {
  ASSERT_TRUE(fs::exists(run_ / "best.pt"));
  double best = -1;
  for (const auto& row : rows()) best = std::max(best, row.at("val_top1").get<double>());
  const Outcome r = pinfeed({"eval", "-c", config_, "--checkpoint", (run_ / "best.pt").string(), "--json"}, false);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.output).at("top1").get<double>(), best);
}

TEST_F(CliEval, PredictNamesTheClassesAndGoesOnPastABadImage) {
  const fs::path images = scratch_ / "predict";
  fs::create_directories(images);
  fs::copy(dir_ / "data" / "val", images, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::ofstream(images / "broken.jpg") << "not a jpeg";
  const Outcome r = pinfeed({"predict", "--checkpoint", (run_ / "last.pt").string(), "--top-k", "2", "--json",
                             images.string()}, false);
  EXPECT_EQ(r.code, 3) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  ASSERT_EQ(lines.size(), 7u) << r.output;  // 6 images and the broken one, in path order
  int errors = 0;
  for (const std::string& line : lines) {
    const nlohmann::json doc = nlohmann::json::parse(line);
    if (doc.contains("error")) {
      ++errors;
      EXPECT_NE(doc.at("path").get<std::string>().find("broken.jpg"), std::string::npos);
      continue;
    }
    ASSERT_EQ(doc.at("top").size(), 2u);
    double sum = 0;
    for (const auto& t : doc.at("top")) {
      EXPECT_EQ(t.at("class").get<std::string>().rfind("class_", 0), 0u) << line;  // gen-data's folder names
      sum += t.at("probability").get<double>();
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);  // both classes
  }
  EXPECT_EQ(errors, 1);
}

TEST_F(CliEval, EvalWithoutAConfigTakesTheRunsOrTheCheckpointsOwn) {
  const Outcome in_run = pinfeed({"eval", "--checkpoint", (run_ / "last.pt").string(), "--json"}, false);
  ASSERT_EQ(in_run.code, 0) << in_run.output;
  const fs::path copy = scratch_ / "copied";
  fs::create_directories(copy);
  fs::copy_file(run_ / "last.pt", copy / "last.pt", fs::copy_options::overwrite_existing);
  const Outcome recorded = pinfeed({"eval", "--checkpoint", (copy / "last.pt").string(), "--json"});
  ASSERT_EQ(recorded.code, 0) << recorded.output;
  EXPECT_NE(recorded.output.find("config: the one " + (copy / "last.pt").string() + " records"), std::string::npos)
      << recorded.output;
  const auto result = [](const Outcome& r) {
    nlohmann::json doc;
    for (const std::string& line : lines_of(r.output)) {
      if (!line.empty() && line[0] == '{') doc = nlohmann::json::parse(line);
    }
    return doc;
  };
  EXPECT_EQ(result(in_run).at("top1"), result(recorded).at("top1"));
}

TEST_F(CliEval, PredictNamesAFifoOrALinkLoopInAFolderItWasGiven) {
  const fs::path images = scratch_ / "odd";
  fs::create_directories(images);
  fs::copy(dir_ / "data" / "val" / "class_000", images, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  ASSERT_EQ(::mkfifo((images / "pipe.jpg").c_str(), 0600), 0);
  fs::create_symlink("loop.jpg", images / "loop.jpg");
  const Outcome r = pinfeed({"predict", "--checkpoint", (run_ / "last.pt").string(), images.string()});
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("pipe.jpg: not a regular file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("loop.jpg: cannot read"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: 2 of 5 input(s) could not be predicted"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("warning:"), std::string::npos) << r.output;
}

TEST_F(CliEval, MoreOutputsThanClassFoldersAreRefusedUnlessAsked) {
  const std::vector<std::string> run = {"train", "-c", config_, "run.dir=\"" + (scratch_ / "wide").string() + "\"",
                                        "train.epochs=1", "run.name=\"wide\"", "model.num_classes=5"};
  const Outcome refused = pinfeed(run);
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("model.num_classes = 5 but"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("has 2 class folders"), std::string::npos) << refused.output;
  std::vector<std::string> asked = run;
  asked.push_back("model.allow_extra_classes=true");
  ASSERT_EQ(pinfeed(asked).code, 0);
  fs::path wide;
  for (const auto& e : fs::directory_iterator(scratch_ / "wide")) wide = e.path() / "last.pt";
  const Outcome eval = pinfeed({"eval", "-c", config_, "--checkpoint", wide.string()});
  EXPECT_EQ(eval.code, 2) << eval.output;
  EXPECT_NE(eval.output.find("has 5 outputs but names 2 classes"), std::string::npos) << eval.output;
  EXPECT_EQ(pinfeed({"eval", "-c", config_, "--checkpoint", wide.string(), "model.allow_extra_classes=true"}).code, 0);
  const Outcome predict = pinfeed({"predict", "--checkpoint", wide.string(), "--top-k", "5", "--json",
                                   (dir_ / "data" / "val" / "class_000").string()}, false);
  EXPECT_EQ(predict.code, 0) << predict.output;
  for (const std::string& line : lines_of(predict.output)) {
    EXPECT_EQ(nlohmann::json::parse(line).at("top").size(), 2u) << line;  // the named classes alone
  }
}

TEST_F(CliEval, InitFromStartsANewRunAndReinitialisesFcForAnotherClassCount) {
  const Outcome gen = pinfeed({"gen-data", "--out", (scratch_ / "three").string(), "--classes", "3",
                               "--train-per-class", "4", "--val-per-class", "1", "--size", "40x40", "--threads", "2"});
  ASSERT_EQ(gen.code, 0) << gen.output;
  const Outcome r = pinfeed({"train", "-c", config_, "data.root=\"" + (scratch_ / "three").string() + "\"",
                             "run.dir=\"" + (scratch_ / "runs").string() + "\"", "train.epochs=1", "run.name=\"ft\"",
                             "train.init_from=\"" + (run_ / "best.pt").string() + "\""});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("train.init_from: starting from the weights of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("it has 2 classes, this run 3: fc is freshly initialised"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("resuming"), std::string::npos) << r.output;
}

TEST_F(CliEval, FilesThatAreNotCheckpointsGetOneLineAndAnExitCode) {
  const fs::path bad = scratch_ / "bad";
  fs::create_directories(bad);
  std::ofstream(bad / "text.pt") << "hello";
  ASSERT_EQ(::mkfifo((bad / "fifo.pt").c_str(), 0600), 0);
  const auto size = fs::file_size(run_ / "last.pt");
  fs::copy_file(run_ / "last.pt", bad / "cut.pt", fs::copy_options::overwrite_existing);
  fs::resize_file(bad / "cut.pt", size / 2);
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string said;
  };
  const std::string missing = (run_ / "nonexistent.pt").string();  // in a run folder: resume looks for the file
  const std::vector<Case> cases = {
      {{"train", "-c", config_, "--resume", missing}, 2, "nonexistent.pt: no such file"},
      {{"eval", "-c", config_, "--checkpoint", missing}, 2, "no such file"},
      {{"eval", "-c", config_, "--checkpoint", "/dev/zero"}, 2, "not a regular file"},
      {{"eval", "-c", config_, "--checkpoint", (bad / "fifo.pt").string()}, 2, "FIFO"},
      {{"eval", "-c", config_, "--checkpoint", bad.string()}, 2, "a directory"},
      {{"eval", "-c", config_, "--checkpoint", (bad / "text.pt").string()}, 2, "not a zip archive"},
      {{"eval", "-c", config_, "--checkpoint", (bad / "cut.pt").string()}, 3, "truncated"},
      {{"predict", "--checkpoint", (bad / "cut.pt").string(), "x.jpg"}, 3, "truncated"},
      {{"train", "-c", config_, "run.dir=\"" + (scratch_ / "runs").string() + "\"",
        "train.init_from=\"" + (bad / "text.pt").string() + "\""}, 2, "not a zip archive"},
  };
  for (const Case& c : cases) {
    const Outcome r = pinfeed(c.args);
    EXPECT_EQ(r.code, c.code) << c.args[0] << " " << c.args.back() << ":\n" << r.output;
    expect_one_error_line(r, c.said);
  }
}

}  // namespace

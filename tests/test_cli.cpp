// The pinfeed executable under hostile input: every bad value, path or file ends in exit code 2 and a message
// naming what is wrong, never a crash, an abort or the OOM killer. Each case runs the built binary in a fresh
// temporary directory (its relative paths land there).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;

struct Outcome {
  int code = -1;  // exit code, or -signal
  std::string output;  // stdout and stderr
};

std::string quoted(const std::string& arg) {  // one shell word, whatever it holds (newlines included)
  std::string out = "'";
  for (const char ch : arg) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("pinfeed_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A config that passes every check; the dataset root does not exist, so a run that gets past the config
    // stops at once with exit 3.
    config_ = write("base.toml", "[data]\nroot = \"missing-root\"\n[train]\ndevice = \"cpu\"\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  Outcome pinfeed(const std::vector<std::string>& args) {
    std::string command = "cd " + quoted(dir_.string()) + " && exec " + quoted(PINFEED_EXE);
    for (const auto& a : args) command += " " + quoted(a);
    command += " 2>&1 </dev/null";
    Outcome r;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe) return r;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
    const int status = ::pclose(pipe);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
    return r;
  }

  Outcome train_with(const std::string& override_arg) { return pinfeed({"train", "-c", config_, override_arg}); }

  fs::path dir_;
  std::string config_;
};

TEST_F(Cli, HostileValuesExitTwoWithAMessageNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.lr=nan", "train.lr"},
      {"train.lr=inf", "train.lr"},
      {"train.momentum=-nan", "train.momentum"},
      {"run.progress_interval_s=inf", "run.progress_interval_s"},
      {"data.workers=100000", "data.workers"},
      {"data.prefetch_batches=1000000000", "data.prefetch_batches"},
      {"train.batch_size=99999999999", "train.batch_size"},
      {"data.image_size=100000", "data.image_size"},
      {"model.num_classes=1e9", "model.num_classes"},
      {"model.num_classes=1000000000", "model.num_classes"},
  };
  for (const auto& [assignment, key] : cases) {
    const Outcome r = train_with(assignment);
    EXPECT_EQ(r.code, 2) << assignment << ":\n" << r.output;
    EXPECT_NE(r.output.find("error: override '" + assignment + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(key + " must be"), std::string::npos) << assignment << ":\n" << r.output;
  }
}

TEST_F(Cli, NanInTheConfigFileExitsTwoWithFileLineColumn) {
  const Outcome r = pinfeed({"train", "-c", write("nan.toml", "[data]\nroot = \"x\"\n[train]\nlr = nan\n")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nan.toml:4:6: train.lr must be a finite number, got nan"), std::string::npos) << r.output;
}

TEST_F(Cli, HostRingsBeyondTheMachinesMemoryExitTwoBeforeAllocating) {
  const Outcome r = pinfeed({"train", "-c", config_, "data.prefetch_batches=1024", "train.batch_size=1048576",
                             "data.image_size=4096"});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("the host batch rings need"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lower data.prefetch_batches, train.batch_size or data.image_size"), std::string::npos) << r.output;
}

TEST_F(Cli, ConfigPathThatIsADeviceOrDirectoryExitsTwo) {
  const std::pair<std::string, std::string> cases[] = {
      {"/dev/urandom", "/dev/urandom: the config file is a device, not a regular file"},
      {dir_.string(), dir_.string() + ": the config file is a directory, not a regular file"},
      {(dir_ / "nope.toml").string(), "nope.toml: cannot open config file: No such file or directory"},
  };
  for (const auto& [path, message] : cases) {
    const Outcome r = pinfeed({"train", "-c", path});
    EXPECT_EQ(r.code, 2) << path << ":\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

TEST_F(Cli, EmptyConfigFileExitsTwoSayingItIsEmpty) {
  const Outcome r = pinfeed({"train", "-c", write("empty.toml", "")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("empty.toml:1:1: the config file is empty"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("data.root is not set"), std::string::npos) << r.output;
}

TEST_F(Cli, RunNameThatIsNotAPlainFolderNameExitsTwo) {
  for (const std::string name : {"../../../x", "a/b", "..", "\"a\\nb\"", "a\nb"}) {
    const Outcome r = train_with("run.name=" + name);
    EXPECT_EQ(r.code, 2) << name << ":\n" << r.output;
    EXPECT_NE(r.output.find("run.name must be a plain folder name"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

TEST_F(Cli, BareWordsThatTomlReadsAsOtherTypesAreStringsForStringKeys) {
  // Past the config, the run stops at the missing dataset (exit 3): the words were taken as a name and a path.
  const Outcome name = train_with("run.name=true");
  EXPECT_EQ(name.code, 3) << name.output;
  const Outcome root = train_with("data.root=nan");
  EXPECT_EQ(root.code, 3) << root.output;
  EXPECT_NE(root.output.find("dataset root nan is not a directory"), std::string::npos) << root.output;
}

}  // namespace

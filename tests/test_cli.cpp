// The pinfeed executable under hostile input: every bad value, path or file ends in exit code 2 and a message
// naming what is wrong, never a crash, an abort or the OOM killer. Each case runs the built binary in a fresh
// temporary directory (its relative paths land there).
#include <gtest/gtest.h>

#include "run_exe.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;
using pinfeed::test::Outcome;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("pinfeed_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A config that passes every check; the dataset root does not exist, so a run that gets past the config
    // stops at once with exit 3.
    // Small enough for the memory check of any machine the tests run on (a CPU step at 224 px, batch 256 needs
    // ~28 GiB).
    config_ = write("base.toml", "[data]\nroot = \"missing-root\"\nimage_size = 64\n[train]\ndevice = \"cpu\"\n"
                                 "batch_size = 16\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  Outcome pinfeed(const std::vector<std::string>& args) { return pinfeed::test::run_exe(PINFEED_EXE, dir_.string(), args); }

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
    const bool named = r.output.find(key + " must be") != std::string::npos ||
                       r.output.find(key + ": expected") != std::string::npos;
    EXPECT_TRUE(named) << assignment << ":\n" << r.output;
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

// The line of `help` that documents `option`.
std::string help_line(const std::string& help, const std::string& option) {
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(option + " ") != std::string::npos || line.find(option + "=") != std::string::npos) return line;
  }
  return "";
}

TEST_F(Cli, HelpOfEveryCommandShowsTheDefaults) {
  const Outcome bench = pinfeed({"bench", "--help"});
  EXPECT_EQ(bench.code, 0) << bench.output;
  for (const auto& [option, value] : {std::pair<std::string, std::string>{"--repeats", "=3"}, {"--warmup", "=20"},
                                      {"--steps", "=100"}}) {
    EXPECT_NE(help_line(bench.output, option).find(value), std::string::npos) << option << ":\n" << bench.output;
  }
  const Outcome gen = pinfeed({"gen-data", "--help"});
  EXPECT_EQ(gen.code, 0) << gen.output;
  for (const auto& [option, value] : {std::pair<std::string, std::string>{"--size", "=64x64"}, {"--classes", "=10"},
                                      {"--train-per-class", "=100"}, {"--val-per-class", "=20"}, {"--quality", "=90"}}) {
    EXPECT_NE(help_line(gen.output, option).find(value), std::string::npos) << option << ":\n" << gen.output;
  }
  for (const char* command : {"train", "bench", "eval"}) {  // the same device flags on every command that trains or evaluates
    const Outcome help = pinfeed({command, "--help"});
    EXPECT_NE(help_line(help.output, "--device").find("train.device"), std::string::npos) << command << help.output;
    EXPECT_NE(help_line(help.output, "--decoder").find("data.decoder"), std::string::npos) << command << help.output;
  }
  const Outcome train = pinfeed({"help", "train"});  // a command's help, as a help topic
  EXPECT_EQ(train.code, 0) << train.output;
  EXPECT_NE(train.output.find("--resume"), std::string::npos) << train.output;
  const Outcome commands = pinfeed({"help"});  // the topic's default: the list of commands
  EXPECT_EQ(commands.code, 0) << commands.output;
  EXPECT_NE(commands.output.find("eval                        top-1, top-5"), std::string::npos) << commands.output;
  // Every option that takes a value says its default: CLI11's "=value", or in words where it comes from the
  // config (--mode, --device, --decoder) or is none (--resume), unless it is required.
  for (const char* command : {"train", "bench", "eval", "predict", "gen-data", "help"}) {
    const Outcome help = pinfeed({command, "--help"});
    ASSERT_EQ(help.code, 0) << help.output;
    std::istringstream lines(help.output.substr(help.output.find("Options:")));
    std::vector<std::pair<std::string, std::string>> options;  // each option's names and type, and all its lines
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("  -", 0) == 0) options.push_back({line.substr(0, line.find("  ", 2)), line});
      else if (line.rfind("    ", 0) == 0 && !options.empty()) options.back().second += line;
    }
    for (const auto& [head, option] : options) {
      std::istringstream words(head);
      std::string names, type;
      words >> names >> type;
      if (type.empty()) continue;  // a flag
      const bool said = head.find('=') != std::string::npos || head.find("REQUIRED") != std::string::npos ||
                        option.find("default") != std::string::npos;
      EXPECT_TRUE(said) << command << ": " << option;
    }
  }
}

// docs/config-keys.md's table is the key table's: made by `pinfeed help config --markdown`, between two markers.
TEST_F(Cli, ConfigKeysPageIsTheTableHelpConfigPrints) {
  const Outcome table = pinfeed({"help", "config", "--markdown"});
  ASSERT_EQ(table.code, 0) << table.output;
  std::ifstream in(std::string(PINFEED_SOURCE_DIR) + "/docs/config-keys.md");
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- config-keys:begin -->\n", end = "<!-- config-keys:end -->";
  const size_t a = page.find(begin), b = page.find(end);
  ASSERT_TRUE(a != std::string::npos && b != std::string::npos && a < b) << "docs/config-keys.md lacks the table's markers";
  EXPECT_EQ(page.substr(a + begin.size(), b - a - begin.size()), table.output)
      << "docs/config-keys.md's key table differs: write it again with scripts/config_keys_doc.sh";
}

TEST_F(Cli, UnknownCommandOrHelpTopicExitsTwoNamingTheNearestOne) {
  const Outcome command = pinfeed({"trian", "-c", config_});
  EXPECT_EQ(command.code, 2) << command.output;
  EXPECT_NE(command.output.find("error: unknown command 'trian'; did you mean 'train'? (commands: train, gen-data, bench"),
            std::string::npos) << command.output;
  const Outcome topic = pinfeed({"help", "confg"});
  EXPECT_EQ(topic.code, 2) << topic.output;
  EXPECT_NE(topic.output.find("help: unknown topic 'confg'; did you mean 'config'? (topics: config | metrics | train"),
            std::string::npos) << topic.output;
  const Outcome far = pinfeed({"help", "zzzzzz"});
  EXPECT_EQ(far.code, 2) << far.output;
  EXPECT_EQ(far.output.find("did you mean"), std::string::npos) << far.output;
  EXPECT_EQ(pinfeed({"help", "metrics"}).code, 0);
}

TEST_F(Cli, ConfigKeyTypedAsAFlagGetsTheOverrideToWrite) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"train", "-c", config_, "--epochs", "1"}, "train: unknown option --epochs; config keys are set as section.key=value: use train.epochs=1"},
      {{"train", "-c", config_, "--batch-size=8"}, "use train.batch_size=8"},
      {{"bench", "-c", config_, "--workers", "2"}, "use data.workers=2"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome r = pinfeed(args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

// CLI11's own errors read as the config's: one "error:" line naming the command, the nearest name where one is
// near, and for a config key spelt as a flag the override to write.
TEST_F(Cli, ParserErrorsGetTheErrorPrefixAndWhatWasLikelyMeant) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"train", "-c", config_, "--mod", "pinned"}, "error: train: unknown option --mod; did you mean '--mode'?"},
      {{"eval", "-c", config_, "--chekpoint", "x"}, "error: eval: unknown option --chekpoint; did you mean '--checkpoint'?"},
      {{"train", "-c", config_, "--decoder", "nvjpg"}, "must be one of \"cpu\" | \"nvjpeg\" | \"auto\", got \"nvjpg\"; did you mean 'nvjpeg'?"},
      {{"eval", "-c", config_, "--checkpoint", "x", "--split", "vall"},
       "error: eval: --split: must be val | train, got 'vall'; did you mean 'val'?"},
      {{"train", "-c", config_, "--train.epochs=2"},
       "error: train: unknown option --train.epochs; config keys are set as section.key=value: use train.epochs=2"},
      {{"eval", "-c", config_}, "error: eval: --checkpoint is required (pinfeed eval --help lists its options)"},
      {{"train", "-c", config_, "pipeline.mode=\"dual_stram\""}, "got \"dual_stram\"; did you mean 'dual_stream'?"},
      {{"train", "-c", config_, "--mode", "dual_stram"}, "got \"dual_stram\"; did you mean 'dual_stream'?"},
      {{"gen-data", "--out", "x", "extra"}, "error: gen-data: unexpected argument extra"},
      {{"predict", "--checkpoint", "x", "--top-k", "0", "a.jpg"}, "error: predict: --top-k: "},
      {{}, "error: a command is required (commands: train, gen-data, bench, eval, predict, help)"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome r = pinfeed(args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line:\n" << r.output;
  }
}

// `--mode dual_stream` (the default on CUDA) on a machine without CUDA: one warning, then the run goes on pageable (here
// to the missing dataset, exit 3).
TEST_F(Cli, ATransferModeThatNeedsCudaRunsPageableOnTheCpuSayingSo) {
  const Outcome r = pinfeed({"train", "-c", config_, "--mode", "dual_stream"});
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("warning: override 'pipeline.mode=\"dual_stream\"':1:15: pipeline.mode = \"dual_stream\" "
                          "needs a CUDA device (device is cpu): running mode pageable"),
            std::string::npos)
      << r.output;
}

// A recipe in fp16 (configs/imagefolder.toml, resnet50_imagenet.toml) on a machine without CUDA: one warning, then
// the run goes on in fp32 (here to the missing dataset, exit 3).
TEST_F(Cli, AHalfPrecisionRecipeTrainsInFp32OnTheCpuSayingSo) {
  const Outcome r = pinfeed({"train", "-c", config_, "train.precision=fp16"});
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("train.precision = \"fp16\" needs a CUDA device (device is cpu): training in fp32"),
            std::string::npos)
      << r.output;
}

// A GPU recipe's smoke run on a CPU: each key only CUDA runs gives way with one warning, then the run goes on (here
// to the missing dataset, exit 3).
TEST_F(Cli, ARecipesCudaOnlyKeysFallBackOnTheCpuWithOneWarningEach) {
  const Outcome r = pinfeed({"train", "-c", config_, "train.cuda_graph=true", "model.fused_bn=on", "data.decoder=nvjpeg"});
  EXPECT_EQ(r.code, 3) << r.output;
  for (const std::string line :
       {"warning: override 'train.cuda_graph=true':1:18: train.cuda_graph = true needs a CUDA device (device is cpu): "
        "training eagerly",
        "warning: override 'model.fused_bn=on':1:16: model.fused_bn = \"on\" needs a CUDA device (device is cpu): "
        "training with ATen's BatchNorm",
        "warning: override 'data.decoder=nvjpeg':1:14: data.decoder = \"nvjpeg\" needs a CUDA device (device is cpu): "
        "training with the JPEGs decoded on the CPU"}) {
    const size_t at = r.output.find(line);
    EXPECT_NE(at, std::string::npos) << line << " in\n" << r.output;
    EXPECT_EQ(r.output.find(line, at + 1), std::string::npos) << "once: " << line << " in\n" << r.output;
  }
}

// pinfeed bench on a CPU runs the rows the CPU runs, one line naming the modes left out (here to the missing
// dataset, exit 3); a mode that needs CUDA asked for by name stays an error naming it.
TEST_F(Cli, BenchOnTheCpuLeavesOutTheModesThatNeedCudaUnlessOneIsAskedFor) {
  const Outcome all = pinfeed({"bench", "-c", config_});
  EXPECT_EQ(all.code, 3) << all.output;
  EXPECT_NE(all.output.find("bench on cpu: modes pinned, non_blocking, pinned_non_blocking, dual_stream left out, "
                            "they need a CUDA device"),
            std::string::npos)
      << all.output;
  const Outcome pinned = pinfeed({"bench", "-c", config_, "--modes", "pageable,pinned"});
  EXPECT_EQ(pinned.code, 2) << pinned.output;
  EXPECT_NE(pinned.output.find("error: --modes: mode 'pinned': pipeline.pin_memory = true needs a CUDA device"),
            std::string::npos)
      << pinned.output;
}

TEST_F(Cli, ValueOfTheWrongTypeSaysWhatTheKeyTakes) {
  const Outcome r = train_with("train.lr=abc");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("train.lr: expected a number, got 'abc'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("a integer"), std::string::npos) << r.output;
}

TEST_F(Cli, OverridesAreTakenAnywhereOnTheLine) {
  // After --modes: an override, not a mode. The override's own check proves it was read as one.
  const Outcome bench = pinfeed({"bench", "-c", config_, "--modes", "pageable", "data.workers=-1"});
  EXPECT_EQ(bench.code, 2) << bench.output;
  EXPECT_NE(bench.output.find("data.workers must be >= 0"), std::string::npos) << bench.output;
  EXPECT_EQ(bench.output.find("unknown mode"), std::string::npos) << bench.output;
  const Outcome two = pinfeed({"bench", "--modes", "pageable,pinned", "train.lr=abc", "-c", config_});
  EXPECT_EQ(two.code, 2) << two.output;
  EXPECT_NE(two.output.find("train.lr: expected a number"), std::string::npos) << two.output;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"train", "train.lr=abc", "-c", config_, "--mode", "pinned"},
        std::vector<std::string>{"train", "-c", config_, "--mode", "pinned", "train.lr=abc"},
        std::vector<std::string>{"train", "--device", "cpu", "train.lr=abc", "-c", config_}}) {
    const Outcome r = pinfeed(args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("train.lr: expected a number"), std::string::npos) << r.output;
  }
  const Outcome typo = pinfeed({"bench", "-c", config_, "--modes", "dual_stram"});
  EXPECT_EQ(typo.code, 2) << typo.output;
  EXPECT_NE(typo.output.find("unknown mode 'dual_stram'; did you mean 'dual_stream'?"), std::string::npos) << typo.output;
}

TEST_F(Cli, ControlCharactersFromTheCommandLineAreNeverEchoedRaw) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"train", "-c", config_, "data.root=\x1b]0;x\x07"},
        std::vector<std::string>{"train", "-c", config_, "run.name=\x1b[2J"},
        std::vector<std::string>{"train", "-c", config_, "no.such\x1b=1"},
        std::vector<std::string>{"help", "\x1b[2J"}, std::vector<std::string>{"\x1b[2J"},
        std::vector<std::string>{"gen-data", "--out", "x", "--size", "\x1b[2J"}}) {
    const Outcome r = pinfeed(args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\\x1b"), std::string::npos) << r.output;
  }
}

TEST_F(Cli, SymlinkLoopInTheDatasetExitsThreeNamingTheFolder) {
  fs::create_directories(dir_ / "data/train/cat/sub");
  fs::create_symlink("..", dir_ / "data/train/cat/sub/up");
  const Outcome r = train_with("data.root=data");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("data/train/cat/sub/up links back to"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("symlink loop"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output;
}

// A run that stops on bad images lists what it found in bad_images.tsv first.
TEST_F(Cli, RunStoppedByBadImagesListsThemInBadImagesTsv) {
  const Outcome gen = pinfeed({"gen-data", "--out", "data", "--classes", "2", "--train-per-class", "3",
                               "--val-per-class", "1", "--size", "16x16", "--threads", "1"});
  ASSERT_EQ(gen.code, 0) << gen.output;
  std::vector<std::string> train_files;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "data/train")) {
    if (e.is_regular_file()) {
      std::ofstream(e.path(), std::ios::trunc) << "not an image";
      train_files.push_back(e.path().string());
    }
  }
  for (const std::string policy : {"fail", "skip"}) {  // fail: at the first; skip: after too many in a row
    const Outcome r = pinfeed({"train", "-c", config_, "data.root=data", "data.image_size=16", "train.batch_size=2",
                               "data.workers=1", "train.epochs=1", "run.name=" + policy, "data.on_bad_image=" + policy});
    EXPECT_EQ(r.code, 3) << r.output;
    std::string listed;
    for (const auto& run : fs::directory_iterator(dir_ / "runs")) {
      if (run.path().filename().string().find(policy) == std::string::npos) continue;
      std::ifstream in(run.path() / "bad_images.tsv");
      listed.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    EXPECT_NE(listed.find("not a JPEG or PNG file"), std::string::npos) << policy << ":\n" << r.output;
    size_t named = 0;
    for (const auto& f : train_files) named += listed.find(fs::path(f).filename().string()) != std::string::npos;
    EXPECT_GE(named, policy == std::string("skip") ? 2u : 1u) << listed;  // skip: several replaced before the stop
    std::istringstream lines(listed);
    std::set<std::string> once;
    for (std::string line; std::getline(lines, line);) EXPECT_TRUE(once.insert(line).second) << "twice: " << line;
  }
}

// Every file under `root`, by its path relative to it, with a hash of its bytes (a failure prints the names and
// hashes, not the JPEGs).
std::map<std::string, size_t> files_under(const fs::path& root) {
  std::map<std::string, size_t> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[fs::relative(e.path(), root).string()] = std::hash<std::string>{}({std::istreambuf_iterator<char>(in), {}});
  }
  return out;
}

size_t error_lines(const std::string& output) {
  size_t n = 0;
  for (size_t at = output.find("error:"); at != std::string::npos; at = output.find("error:", at + 1)) ++n;
  return n;
}

TEST_F(Cli, GenDataRefusesASideOver8192WithExitTwoBeforeWritingAnything) {
  for (const std::string size : {"100000x100000", "8193x64", "64x8193", "4294967360x64", "+64x64", "64x", "7x64"}) {
    const Outcome r = pinfeed({"gen-data", "--out", "data", "--size", size, "--classes", "1", "--train-per-class", "1",
                               "--val-per-class", "1"});
    EXPECT_EQ(r.code, 2) << size << ":\n" << r.output;
    EXPECT_NE(r.output.find("error: gen-data: --size must be WxH with each side 8 to 8192, got '" + size + "'"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(error_lines(r.output), 1u) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "data")) << size;
  }
  EXPECT_NE(help_line(pinfeed({"gen-data", "--help"}).output, "--size").find("each side 8 to 8192"), std::string::npos);
}

TEST_F(Cli, GenDataRefusesANonEmptyOutLeavingItsFilesAsTheyWereUnlessOverwrite) {
  const std::vector<std::string> small = {"--classes", "2", "--train-per-class", "2", "--val-per-class", "1",
                                          "--size", "16x16", "--threads", "1"};
  auto gen = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"gen-data", "--out", "data"});
    args.insert(args.end(), small.begin(), small.end());
    return pinfeed(args);
  };
  fs::create_directories(dir_ / "data");  // an empty folder is as good as a new one
  ASSERT_EQ(gen({}).code, 0);
  std::ofstream(dir_ / "data" / "notes.txt") << "a user's file";
  const auto before = files_under(dir_ / "data");
  const Outcome refused = gen({"--seed", "5"});
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("error: gen-data: --out data is not empty: name a new or empty folder, or pass "
                                "--overwrite to write into it"),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(error_lines(refused.output), 1u) << refused.output;
  EXPECT_EQ(files_under(dir_ / "data"), before);
  EXPECT_NE(help_line(pinfeed({"gen-data", "--help"}).output, "--overwrite").find("non-empty --out"), std::string::npos);

  const Outcome overwritten = gen({"--seed", "5", "--overwrite"});
  ASSERT_EQ(overwritten.code, 0) << overwritten.output;
  const auto after = files_under(dir_ / "data");
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(after.at("notes.txt"), before.at("notes.txt"));  // only gen-data's own file names are written
  EXPECT_NE(after.at("train/class_000/000000.jpg"), before.at("train/class_000/000000.jpg"));  // another seed
}

// A file that an encoder thread cannot write (a folder stands at its path) ends the command with one error line
// naming it and exit code 4 (output), after the other threads have stopped: never std::terminate's abort.
TEST_F(Cli, GenDataWriteErrorInAnEncoderThreadIsOneErrorLineWithExitFour) {
  fs::create_directories(dir_ / "data/train/class_001/000002.jpg");
  const Outcome r = pinfeed({"gen-data", "--out", "data", "--overwrite", "--classes", "2", "--train-per-class", "4",
                             "--val-per-class", "1", "--size", "16x16", "--threads", "2"});
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("error: gen-data: cannot write data/train/class_001/000002.jpg"), std::string::npos)
      << r.output;
  EXPECT_EQ(error_lines(r.output), 1u) << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
}

// Every cell of the bench's table and log reads as a value or "n/a": no unit glued to a missing figure, no range
// of nothing, counts in the right number.
TEST_F(Cli, BenchReportCellsReadAsAValueOrNotAvailable) {
  const Outcome gen = pinfeed({"gen-data", "--out", "data", "--classes", "2", "--train-per-class", "4",
                               "--val-per-class", "1", "--size", "16x16", "--threads", "1"});
  ASSERT_EQ(gen.code, 0) << gen.output;
  // A peer's row whose figures are all missing but its rate, in a bench without pageable or gpu_resident rows.
  const std::string reference = write("ref.json", R"({"meta": {}, "rows": [{"implementation": "pytorch", "mode": "pinned",
      "samples_per_s_median": 100, "wait_ms_p50_median": null, "wait_ms_mean_median": null, "gpu_idle_median": null,
      "h2d_ms_median": null, "samples_per_s": [100], "wait_ms_p50": [null], "wait_ms_mean": [null],
      "gpu_idle": [null], "h2d_ms_mean": [null]}]})");
  const std::vector<std::string> common = {"--repeats", "1", "--warmup", "0", "--steps", "2", "data.root=data",
                                           "data.image_size=16", "train.batch_size=2"};
  auto bench = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"bench", "-c", config_});
    args.insert(args.end(), common.begin(), common.end());
    return pinfeed(args);
  };
  const Outcome peers = bench({"--modes", "loader_only", "--reference", reference, "--out", "a", "data.workers=2"});
  ASSERT_EQ(peers.code, 0) << peers.output;
  EXPECT_NE(peers.output.find("| pytorch | pinned | n/a | n/a | n/a | 100 [100-100] | n/a | n/a |"), std::string::npos)
      << peers.output;
  EXPECT_NE(peers.output.find(": 2 workers,"), std::string::npos) << peers.output;
  const Outcome own = bench({"--modes", "pageable,loader_only", "--out", "b", "data.workers=1"});
  ASSERT_EQ(own.code, 0) << own.output;
  EXPECT_NE(own.output.find("GPU idle n/a\n"), std::string::npos) << own.output;  // the CPU has no GPU to idle
  EXPECT_NE(own.output.find(": 1 worker,"), std::string::npos) << own.output;
  EXPECT_NE(own.output.find("1 repeat of 2 timed steps"), std::string::npos) << own.output;
  for (const Outcome* r : {&peers, &own}) {
    for (const char* wrong : {"n/a%", "n/ax", "[inf", "inf]", "| inf", "| nan", "n/a / n/a", "1 workers"}) {
      EXPECT_EQ(r->output.find(wrong), std::string::npos) << wrong << " in:\n" << r->output;
    }
  }
}

}  // namespace

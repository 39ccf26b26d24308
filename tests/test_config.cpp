#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "app/config/config.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

const char* kBase = "[data]\nroot = \"/data\"\n";

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return test::message_of<ConfigError>([&] { parse_config_string(text, "cfg.toml", overrides); });
}

TEST(Config, ParsesEverySectionIntoOptionStructs) {
  const Config c = parse_config_string(std::string(kBase) +
                                           "image_size = 64\n[model]\nnum_classes = 7\n[train]\nlr = 0.5\nepochs = 3\n"
                                           "nesterov = true\nprecision = \"bf16\"\n[pipeline]\nmode = \"dual_stream\"\n"
                                           "transfer_dtype = \"uint8\"\n[run]\nname = \"x\"\nlog_steps = true\n",
                                       "cfg.toml");
  EXPECT_EQ(c.dataset.root, "/data");
  EXPECT_EQ(c.transform.size, 64);
  EXPECT_EQ(c.model.num_classes, 7);
  EXPECT_DOUBLE_EQ(c.schedule.lr, 0.5);
  EXPECT_EQ(c.schedule.epochs, 3);
  EXPECT_TRUE(c.step.optimizer.sgd.nesterov);
  EXPECT_EQ(c.step.precision, engine::Precision::kBf16);
  EXPECT_TRUE(c.run.log_steps);
  const auto& p = c.pipeline;  // the preset applied to the flags
  EXPECT_EQ(p.mode, pipeline::Mode::kDualStream);
  EXPECT_TRUE(p.pin_memory);
  EXPECT_TRUE(p.non_blocking);
  EXPECT_TRUE(p.dual_stream);
  EXPECT_EQ(p.transfer_dtype, pipeline::TransferDtype::kUint8);
}

TEST(Config, IntegerIsAcceptedWhereAFloatIsExpected) {
  EXPECT_DOUBLE_EQ(parse_config_string(std::string(kBase) + "[train]\nlr = 1\n", "cfg.toml").schedule.lr, 1.0);
}

TEST(Config, UnknownKeyIsReportedWithFileLineColumn) {
  EXPECT_EQ(error_of(std::string(kBase) + "[train]\nlearning_rate = 0.1\n").rfind("cfg.toml:4:1: unknown key 'train.learning_rate'", 0), 0u)
      << error_of(std::string(kBase) + "[train]\nlearning_rate = 0.1\n");
}

TEST(Config, ARenamedKeyNamesItsNewName) {
  EXPECT_NE(error_of(kBase, {"data.gpu_decode_share=0.5"})
                .find("unknown key 'data.gpu_decode_share' (renamed); did you mean 'data.nvjpeg_share'?"),
            std::string::npos) << error_of(kBase, {"data.gpu_decode_share=0.5"});
  const auto e = error_of(std::string(kBase) + "[pipeline]\nprefetch = \"dual_stream\"\n");
  EXPECT_NE(e.find("cfg.toml:4:1: unknown key 'pipeline.prefetch' (renamed); did you mean 'pipeline.dual_stream'?"),
            std::string::npos) << e;
}

// At the section's header, where the typo is, not at its first key.
TEST(Config, UnknownSectionIsReported) {
  EXPECT_NE(error_of(std::string(kBase) + "[optim]\nlr = 0.1\n").find("cfg.toml:3:1: unknown section [optim]"), std::string::npos);
}

TEST(Config, WrongTypeNamesKeyAndBothTypes) {
  const auto e = error_of(std::string(kBase) + "[train]\nepochs = \"ten\"\n");
  EXPECT_NE(e.find("cfg.toml:4:10: train.epochs: expected an integer, got \"ten\""), std::string::npos) << e;
}

TEST(Config, ImpossibleValueIsRejected) {
  EXPECT_NE(error_of(std::string(kBase) + "[train]\nbatch_size = 0\n").find("cfg.toml:4:14: train.batch_size must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "[train]\nmomentum = 1.0\n").find("train.momentum must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"data.nvjpeg_share=1.5"}).find("data.nvjpeg_share must be in [0, 1], got 1.5"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "[train]\ndevice = \"gpu\"\n").find("train.device must be"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "[pipeline]\nmode = \"fast\"\n").find("pipeline.mode must be one of \"auto\" | \"pageable\""), std::string::npos);
  EXPECT_EQ(error_of(std::string(kBase) + "[data]\n").rfind("cfg.toml:3:", 0), 0u);  // a table defined twice
}

TEST(Config, MalformedTomlReportsParserPosition) {
  const auto e = error_of("[data]\nroot = \"/data\nimage_size = 3\n");
  EXPECT_EQ(e.rfind("cfg.toml:2:", 0), 0u) << e;
}

TEST(Config, MissingRootIsAnError) {
  EXPECT_NE(error_of("[train]\nlr = 0.1\n").find("data.root is not set"), std::string::npos);
}

TEST(Config, ModeConflictingWithExplicitFlagNamesTheFlag) {
  const auto e = error_of(std::string(kBase) + "[pipeline]\nmode = \"pinned\"\npin_memory = false\n");
  EXPECT_NE(e.find("cfg.toml:5:14: pipeline.pin_memory contradicts pipeline.mode = \"pinned\""), std::string::npos) << e;
}

TEST(Config, DualStreamWithoutPinnedMemoryIsRefused) {
  const auto e = error_of(std::string(kBase) + "[pipeline]\ndual_stream = true\nnon_blocking = true\n");
  EXPECT_NE(e.find("needs pipeline.pin_memory = true"), std::string::npos) << e;
}

TEST(Config, OverridesUseTomlValueSyntaxAndTheSameChecks) {
  const Config c = parse_config_string(kBase, "cfg.toml", {"train.lr=0.25", "run.name=\"abc\"", "data.root=/other"});
  EXPECT_DOUBLE_EQ(c.schedule.lr, 0.25);
  EXPECT_EQ(c.run.name, "abc");
  EXPECT_EQ(c.dataset.root, "/other");  // a bare word is accepted for a string key
  EXPECT_NE(error_of(kBase, {"train.epochs=zero"}).find("override 'train.epochs=zero':1:"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"train.epochs=-1"}).find("train.epochs must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"train.nope=1"}).find("unknown key 'train.nope'"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"novalue"}).find("expected section.key=value"), std::string::npos);
}

TEST(Config, NonFiniteFloatIsRejectedForEveryFloatKey) {
  int float_keys = 0;
  for (const auto& k : config_keys()) {
    if (k.type != "float") continue;
    ++float_keys;
    for (const char* v : {"nan", "-nan", "inf", "-inf", "+inf"}) {
      const auto e = error_of(kBase, {k.name + "=" + v});
      EXPECT_NE(e.find(k.name + " must be a finite number"), std::string::npos) << k.name << "=" << v << ": " << e;
    }
  }
  EXPECT_GT(float_keys, 5);
  const auto e = error_of(std::string(kBase) + "[train]\nlr = nan\n");
  EXPECT_NE(e.find("cfg.toml:4:6: train.lr must be a finite number, got nan"), std::string::npos) << e;
}

TEST(Config, SizesBeyondTheirRangeAreRejectedNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"data.workers=100000", "data.workers must be <= 1024, got 100000"},
      {"data.prefetch_batches=1000000000", "data.prefetch_batches must be <= 1024, got 1000000000"},
      {"train.batch_size=99999999999", "train.batch_size must be <= 1048576, got 99999999999"},
      {"data.image_size=100000", "data.image_size must be <= 4096, got 100000"},
      {"model.num_classes=1000000000", "model.num_classes must be <= 100000, got 1000000000"},
      {"model.num_classes=1e9", "model.num_classes: expected an integer, got '1e9'"},
      {"pipeline.pinned_budget_mb=9223372036854775807", "pipeline.pinned_budget_mb must be <= "},
      {"dist.timeout_s=9223372036854775807", "dist.timeout_s must be <= 604800"},
      {"data.max_image_pixels=-1", "data.max_image_pixels must be >= 0"},
  };
  for (const auto& [assignment, message] : cases) {
    const auto e = error_of(kBase, {assignment});
    EXPECT_NE(e.find(message), std::string::npos) << assignment << ": " << e;
  }
}

TEST(Config, RunNameMustBeAPlainFolderName) {
  for (const std::string& name : std::vector<std::string>{"../../../x", "a/b", "..", "a..b", "", std::string(101, 'n')}) {
    const auto e = error_of(kBase, {"run.name=\"" + name + "\""});
    EXPECT_NE(e.find("run.name must be a plain folder name"), std::string::npos) << name << ": " << e;
  }
  // A newline, whether TOML's escape or a raw one in a bare word, is refused and shown escaped.
  for (const std::string assignment : {"run.name=\"a\\nb\"", "run.name=a\nb"}) {
    const auto e = error_of(kBase, {assignment});
    EXPECT_NE(e.find("run.name must be a plain folder name"), std::string::npos) << e;
    EXPECT_NE(e.find("a\\x0ab"), std::string::npos) << e;
  }
  EXPECT_NE(error_of(std::string(kBase) + "[run]\nname = \"../up\"\n").find("cfg.toml:4:8: run.name must be"), std::string::npos);
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml", {"run.name=resnet50-lr0.2_b256"}).run.name, "resnet50-lr0.2_b256");
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml", {"run.name=" + std::string(100, 'n')}).run.name.size(), 100u);
}

TEST(Config, BareWordForAStringKeyIsTakenAsWrittenWhateverTomlReadsItAs) {
  const Config c = parse_config_string("", "cfg.toml", {"run.name=true", "data.root=nan", "train.device=cpu"});
  EXPECT_EQ(c.run.name, "true");
  EXPECT_EQ(c.dataset.root, "nan");
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml", {"run.name=123"}).run.name, "123");
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml", {"run.name=inf"}).run.name, "inf");
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml", {"run.name=\"quoted\""}).run.name, "quoted");
  // Other keys keep TOML's types: a bare word is no boolean.
  EXPECT_NE(error_of(kBase, {"train.eval=yes"}).find("override 'train.eval=yes':1:"), std::string::npos);
}

TEST(Config, MaxImagePixelsDefaultsTo100MegapixelsAndReadsBack) {
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml").transform.max_image_pixels, 100'000'000);
  const Config c = parse_config_string(kBase, "cfg.toml", {"data.max_image_pixels=0"});
  EXPECT_EQ(c.transform.max_image_pixels, 0);
  EXPECT_EQ(parse_config_string(to_toml(c), "resolved.toml").transform.max_image_pixels, 0);
}

TEST(Config, TraceStepsIsARangeOfStepsOrOneStep) {
  EXPECT_FALSE(parse_config_string(kBase, "cfg.toml").run.trace_steps);
  EXPECT_FALSE(parse_step_range(""));
  const auto range = parse_step_range("200-220");
  ASSERT_TRUE(range);
  EXPECT_EQ(range->first, 200);
  EXPECT_EQ(range->last, 220);
  EXPECT_EQ(range->size(), 21);
  EXPECT_EQ(range->text(), "200-220");
  EXPECT_EQ(parse_step_range("7")->last, 7);
  EXPECT_EQ(parse_step_range("0-999")->size(), kMaxTraceSteps);
  EXPECT_EQ(parse_config_string(kBase, "cfg.toml", {"run.trace_steps=3-4"}).run.trace_steps->text(), "3-4");
}

TEST(Config, TraceStepsThatAreNoRangeAreRefusedWithFileLineColumn) {
  for (const std::string bad : {"5-3", "-1", "1-", "a-b", " 1-2", "1 - 2", "1-2-3", "+1-2", "1.5-2", "1234567890123-1234567890124"}) {
    const auto e = error_of(kBase, {"run.trace_steps=\"" + bad + "\""});
    EXPECT_NE(e.find("run.trace_steps must be \"A-B\" (steps A to B, 0 <= A <= B) or \"A\", got \"" + bad + "\""),
              std::string::npos) << bad << ": " << e;
  }
  const auto e = error_of(std::string(kBase) + "[run]\ntrace_steps = \"10-9\"\n");
  EXPECT_NE(e.find("cfg.toml:4:15: run.trace_steps must be"), std::string::npos) << e;
  const auto long_range = error_of(kBase, {"run.trace_steps=0-1000"});
  EXPECT_NE(long_range.find("run.trace_steps must span at most 1000 steps"), std::string::npos) << long_range;
}

TEST(Config, MissingFileIsAConfigError) {
  EXPECT_THROW(load_config("/nonexistent/pinfeed.toml"), ConfigError);
}

std::string load_error(const std::string& path) {
  return test::message_of<ConfigError>([&] { load_config(path); });
}

TEST(Config, ConfigPathThatIsNotARegularFileIsRefused) {
  const std::string dir = test::fresh_dir("config_kinds");
  EXPECT_NE(load_error(dir).find(dir + ": the config file is a directory, not a regular file"), std::string::npos) << load_error(dir);
  EXPECT_NE(load_error("/dev/urandom").find("/dev/urandom: the config file is a device"), std::string::npos);
  EXPECT_NE(load_error("/dev/null").find("is a device"), std::string::npos);
  // A FIFO with no writer: refused without waiting for one.
  const std::string fifo = dir + "/fifo.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(load_error(fifo).find("is a FIFO, not a regular file"), std::string::npos) << load_error(fifo);
}

TEST(Config, EmptyConfigFileSaysItIsEmpty) {
  const std::string path = test::fresh_dir("config_empty") + "/empty.toml";
  std::ofstream(path) << "";
  EXPECT_NE(load_error(path).find(path + ":1:1: the config file is empty"), std::string::npos) << load_error(path);
  std::ofstream(path) << "\n  \n";
  EXPECT_NE(load_error(path).find("the config file is empty"), std::string::npos);
}

TEST(Config, ConfigFileOverOneMebibyteIsRefused) {
  const std::string path = test::fresh_dir("config_big") + "/big.toml";
  {
    std::ofstream out(path);
    out << kBase;
    while (out.tellp() <= kMaxConfigBytes) out << "# " << std::string(1000, 'x') << "\n";
  }
  EXPECT_NE(load_error(path).find("larger than the 1 MiB limit"), std::string::npos) << load_error(path);
}

TEST(Config, UnreadableConfigFileSaysWhy) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  const std::string path = test::fresh_dir("config_unreadable") + "/secret.toml";
  std::ofstream(path) << kBase;
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  EXPECT_NE(load_error(path).find("cannot open config file: Permission denied (check its permissions)"), std::string::npos)
      << load_error(path);
}

TEST(Config, ResolvedConfigRoundTrips) {
  const Config c = parse_config_string(std::string(kBase) + "[train]\nlr = 0.3\n[pipeline]\nmode = \"pinned\"\n", "cfg.toml");
  const Config again = parse_config_string(to_toml(c), "resolved.toml");
  EXPECT_DOUBLE_EQ(again.schedule.lr, 0.3);
  EXPECT_EQ(again.pipeline.mode, pipeline::Mode::kPinned);
  EXPECT_EQ(to_toml(again), to_toml(c));
}

TEST(Config, SwitchKeysTakeTrueFalseOrAutoAndReadBack) {
  const Config defaults = parse_config_string(kBase, "cfg.toml");
  EXPECT_FALSE(defaults.train.channels_last.has_value());  // "auto"
  EXPECT_FALSE(defaults.train.cuda_graph.has_value());
  EXPECT_EQ(defaults.dataset.decoder, pipeline::Decoder::kAuto);
  EXPECT_FALSE(defaults.pipeline.mode.has_value());  // "auto"
  const Config c = parse_config_string(std::string(kBase) + "[train]\nchannels_last = true\ncuda_graph = \"auto\"\n",
                                       "cfg.toml", {"train.cuda_graph=false", "train.channels_last=auto"});
  EXPECT_FALSE(c.train.channels_last.has_value());
  EXPECT_EQ(c.train.cuda_graph, false);
  const Config again = parse_config_string(to_toml(c), "resolved.toml");
  EXPECT_EQ(to_toml(again), to_toml(c));
  EXPECT_EQ(again.train.cuda_graph, false);
  const auto e = test::message_of<ConfigError>(
      [] { parse_config_string(std::string(kBase) + "[train]\ncuda_graph = \"yes\"\n", "cfg.toml"); });
  EXPECT_NE(e.find("cfg.toml:4:14: train.cuda_graph must be true, false or \"auto\", got \"yes\""), std::string::npos) << e;
  const auto typed = test::message_of<ConfigError>(
      [] { parse_config_string(std::string(kBase) + "[train]\nchannels_last = 1\n", "cfg.toml"); });
  EXPECT_NE(typed.find("train.channels_last: expected true, false or \"auto\", got 1"), std::string::npos) << typed;
  // The old spelling of pipeline.mode = "auto" still reads.
  EXPECT_FALSE(parse_config_string(std::string(kBase) + "[pipeline]\nmode = \"\"\n", "cfg.toml").pipeline.mode);
}

TEST(Config, ShippedConfigsParse) {
  int shipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PINFEED_SOURCE_DIR) + "/configs")) {
    // A config for any ImageFolder leaves data.root to the command line, as its header says.
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> root;
    if (text.find("\nroot = \"\"") != std::string::npos) root.push_back("data.root=\"/data/mine\"");
    EXPECT_NO_THROW(load_config(entry.path().string(), root)) << entry.path();
    ++shipped;
  }
  EXPECT_GE(shipped, 6);
  // FFCV's 16-epoch schedule: 12 epochs at 160, 4 at 192, validation at 224.
  const Config ffcv = load_config(std::string(PINFEED_SOURCE_DIR) + "/configs/resnet50_ffcv16.toml");
  std::vector<int> sides;
  for (int64_t e = 0; e < ffcv.schedule.epochs; ++e) sides.push_back(data::side_of(ffcv.transform, true, e));
  std::vector<int> want(12, 160);
  want.insert(want.end(), 4, 192);
  EXPECT_EQ(sides, want);
  EXPECT_EQ(data::side_of(ffcv.transform, false, 0), 224);
}

// FFCV's ResNet-18 configs (rn18_16_epochs.yaml, rn18_88_epochs.yaml): resnet18 with BlurPool and flips, batch
// 1024 at 0.5 (0.125 per 256), weight decay 5e-5, the ramp 160 -> 192 rounded as FFCV rounds it, validation at 256.
TEST(Config, FfcvResNet18ConfigsHoldTheirSourcesValues) {
  const std::string dir = std::string(PINFEED_SOURCE_DIR) + "/configs/";
  for (const auto& [file, epochs, at_160] : {std::tuple{"resnet18_ffcv16.toml", 16, 12}, {"resnet18_ffcv88.toml", 88, 71}}) {
    SCOPED_TRACE(file);
    const Config c = load_config(dir + file, {"data.root=\"/data/mine\""});
    EXPECT_EQ(c.step.net.arch, model::Arch::kResNet18);
    EXPECT_EQ(c.schedule.epochs, epochs);
    std::vector<int> sides;
    for (int64_t e = 0; e < c.schedule.epochs; ++e) sides.push_back(data::side_of(c.transform, true, e));
    std::vector<int> want(at_160, 160);
    want.insert(want.end(), epochs - at_160, 192);
    EXPECT_EQ(sides, want);
    EXPECT_EQ(data::side_of(c.transform, false, 0), 256);
    EXPECT_EQ(c.train_loader.batch_size, 1024);
    EXPECT_DOUBLE_EQ(c.schedule.lr * 1024 / c.schedule.reference_batch, 0.5);
    EXPECT_DOUBLE_EQ(c.step.optimizer.sgd.weight_decay, 5e-5);
    EXPECT_DOUBLE_EQ(c.step.label_smoothing, 0.1);
    EXPECT_TRUE(c.step.net.blurpool);
    EXPECT_TRUE(c.step.eval_flip);
  }
}

// The recipe configs against their sources' numbers (each config's header cites them).
TEST(Config, RecipeConfigsHoldTheirSourcesValues) {
  const std::string dir = std::string(PINFEED_SOURCE_DIR) + "/configs/";
  // FFCV's 88 epochs: the ramp 160 -> 192 between epochs 65 and 76 rounds to 71 epochs at 160, 17 at 192;
  // validation at 256 from a 292 px resize (224/256 of the side: a 584 px image gives a 512 px crop).
  const Config ffcv88 = load_config(dir + "resnet50_ffcv88.toml");
  std::vector<int> sides;
  for (int64_t e = 0; e < ffcv88.schedule.epochs; ++e) sides.push_back(data::side_of(ffcv88.transform, true, e));
  std::vector<int> want(71, 160);
  want.insert(want.end(), 17, 192);
  EXPECT_EQ(sides, want);
  const int val88 = data::side_of(ffcv88.transform, false, 0);
  EXPECT_EQ(val88, 256);
  EXPECT_EQ(data::val_crop(584, 584, data::at_side(ffcv88.transform, val88)).w, 512);
  for (const Config& c : {ffcv88, load_config(dir + "resnet50_ffcv16.toml")}) {
    EXPECT_TRUE(c.step.net.blurpool);  // use_blurpool 1
    EXPECT_TRUE(c.step.eval_flip);     // lr_tta
  }
  // torchvision's new recipe: 176 px crops, 224 px evaluation from a 232 px resize (a 464 px image: 448 px).
  const Config tv = load_config(dir + "resnet50_torchvision_v2.toml");
  EXPECT_EQ(data::side_of(tv.transform, true, 0), 176);
  const int val_tv = data::side_of(tv.transform, false, 0);
  EXPECT_EQ(val_tv, 224);
  EXPECT_EQ(data::val_crop(464, 464, data::at_side(tv.transform, val_tv)).w, 448);
  EXPECT_TRUE(tv.step.ema.enabled);
  // 0.99998 adjusted for 8 x 128 samples, 32 steps and 600 epochs, per 32 steps; its 32nd root per step.
  const double per_32_steps = 1 - (1 - 0.99998) * 8 * 128 * 32 / 600;
  EXPECT_NEAR(tv.step.ema.decay, std::pow(per_32_steps, 1.0 / 32), 1e-8);
}

TEST(Config, EveryKeyHasHelp) {
  for (const auto& k : config_keys()) EXPECT_FALSE(k.help.empty()) << k.name;
}

TEST(Config, UnknownKeySuggestsTheKeyMostLikelyMeant) {
  const std::pair<std::string, std::string> overrides[] = {
      {"train.epoch=3", "did you mean 'train.epochs'?"},      // a typo
      {"epochs=3", "did you mean 'train.epochs'?"},           // no section
      {"data.lr=0.1", "did you mean 'train.lr'?"},            // the wrong section
      {"data.worker=2", "did you mean 'data.workers'?"},
  };
  for (const auto& [assignment, hint] : overrides) {
    const std::string e = error_of(kBase, {assignment});
    EXPECT_NE(e.find("unknown key"), std::string::npos) << e;
    EXPECT_NE(e.find(hint), std::string::npos) << assignment << ": " << e;
  }
  EXPECT_EQ(error_of(kBase, {"train.zzzzzzzzzz=1"}).find("did you mean"), std::string::npos);  // nothing near
  const std::string file = error_of(std::string(kBase) + "[train]\nbatchsize = 8\n");
  EXPECT_EQ(file.rfind("cfg.toml:4:1: unknown key 'train.batchsize'; did you mean 'train.batch_size'?", 0), 0u) << file;
  const std::string section = error_of(std::string(kBase) + "[trian]\nepochs = 1\n");
  EXPECT_NE(section.find("unknown section [trian]; did you mean 'train'?"), std::string::npos) << section;
  const std::string choice = error_of(kBase, {"train.precision=bf61"});
  EXPECT_NE(choice.find("did you mean 'bf16'?"), std::string::npos) << choice;
}

TEST(Config, ValueOfTheWrongTypeNamesTheKeyTheTypeAndTheValue) {
  const std::pair<std::string, std::string> cases[] = {
      {"train.lr=abc", "override 'train.lr=abc':1:10: train.lr: expected a number, got 'abc'"},
      {"train.epochs=1.5", "train.epochs: expected an integer, got '1.5'"},
      {"train.nesterov=yes", "train.nesterov: expected true or false, got 'yes'"},
      {"train.lr=\"0.1\"", "train.lr: expected a number, got '\"0.1\"'"},
  };
  for (const auto& [assignment, message] : cases) {
    const std::string e = error_of(kBase, {assignment});
    EXPECT_NE(e.find(message), std::string::npos) << e;
    EXPECT_EQ(e.find("could not determine"), std::string::npos) << e;  // not toml++'s own words
  }
  // Every integer key says "an integer", never "a integer".
  for (const auto& k : config_keys()) {
    if (k.type != "integer") continue;
    const std::string e = error_of(kBase, {k.name + "=0.5"});
    EXPECT_NE(e.find(k.name + ": expected an integer, got '0.5'"), std::string::npos) << e;
  }
}

TEST(Config, ControlCharactersInValuesAreRefusedOrEscapedNeverEchoed) {
  for (const std::string key : {"data.root", "data.train_split", "data.val_split", "run.dir"}) {
    const std::string e = error_of(kBase, {key + "=a\x1b[31mb"});
    EXPECT_NE(e.find(key + " must not hold control characters, got \"a\\x1b[31mb\""), std::string::npos) << e;
    EXPECT_EQ(e.find('\x1b'), std::string::npos) << key;
  }
  for (const std::string assignment : {"pipeline.mode=\x1b[2J", "train.device=\x1b[2J", "train.lr=\x1b",
                                       "no\x1b.such=1", "run.trace_steps=1\x1b"}) {
    const std::string e = error_of(kBase, {assignment});
    EXPECT_NE(e.find("\\x1b"), std::string::npos) << e;
    EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  }
}

TEST(Config, AugmentationKeysReachTheAugmentOptionsAndReadBack) {
  const Config c = parse_config_string(std::string(kBase) + "auto_augment = \"rand-m9-n2\"\naugment_fill = \"124,116,104\"\n"
                                           "augment_interpolation = \"bilinear\"\nrandom_erasing = 0.25\n"
                                           "random_erasing_value = \"random\"\nmixup_alpha = 0.8\ncutmix_alpha = 1\n"
                                           "mixup_prob = 0.5\nmixup_switch_prob = 0.3\n",
                                       "cfg.toml");
  const auto& a = c.augment;
  EXPECT_EQ(a.auto_augment.policy, pipeline::augment::Policy::kRandAugment);
  EXPECT_EQ(a.auto_augment.rand_ops, 2);
  EXPECT_EQ(a.auto_augment.rand_magnitude, 9);
  EXPECT_EQ(a.interpolation, pipeline::augment::Interpolation::kBilinear);
  EXPECT_EQ(*a.fill, (std::array<float, 3>{124, 116, 104}));
  EXPECT_DOUBLE_EQ(a.erasing_p, 0.25);
  EXPECT_EQ(a.erasing_value, pipeline::augment::ErasingValue::kRandom);
  EXPECT_DOUBLE_EQ(a.mixup_alpha, 0.8);
  EXPECT_DOUBLE_EQ(a.cutmix_alpha, 1.0);
  EXPECT_DOUBLE_EQ(a.mix_prob, 0.5);
  EXPECT_DOUBLE_EQ(a.switch_prob, 0.3);
  const Config back = parse_config_string(to_toml(c), "back.toml");
  EXPECT_EQ(back.augment.auto_augment, a.auto_augment);
  EXPECT_EQ(back.augment.fill, a.fill);
  EXPECT_FALSE(parse_config_string(kBase, "cfg.toml").augment.any());  // off unless asked for
}

TEST(Config, BadAugmentationValuesSayWhatIsAllowedInOneLine) {
  const auto policy = error_of(kBase, {"data.auto_augment=\"rand-m40-n2\""});
  EXPECT_NE(policy.find("data.auto_augment must be \"\" (off), \"trivial\""), std::string::npos) << policy;
  EXPECT_NE(policy.find("got \"rand-m40-n2\""), std::string::npos) << policy;
  EXPECT_EQ(policy.find('\n'), std::string::npos) << policy;
  EXPECT_NE(error_of(kBase, {"data.augment_fill=\"1,2\""}).find("data.augment_fill must be"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"data.random_erasing=1.5"}).find("data.random_erasing must be in [0, 1], got 1.5"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"data.random_erasing_value=\"noise\""}).find("must be one of \"zero\" | \"random\""),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"data.mixup_alpha=-1"}).find("data.mixup_alpha must be in [0, 100], got -1"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"data.augment_interpolation=\"bicubic\""}).find("must be one of \"nearest\" | \"bilinear\""),
            std::string::npos);
}

// 0 would make LAMB divide 0 by 0 where a gradient is 0, and LARS's trust ratio 0 for every weight it scales.
TEST(Config, LambEpsAndLarsEtaOfZeroAreRefusedNamingTheKey) {
  const auto eps = error_of(kBase, {"train.optimizer=lamb", "train.lamb_eps=0"});
  EXPECT_EQ(eps.rfind("override 'train.lamb_eps=0':1:16: train.lamb_eps must be in (0, 1], got 0", 0), 0u) << eps;
  const auto eta = error_of(kBase, {"train.optimizer=lars", "train.lars_eta=0"});
  EXPECT_EQ(eta.rfind("override 'train.lars_eta=0':1:16: train.lars_eta must be in (0, 1], got 0", 0), 0u) << eta;
  const Config small = parse_config_string(kBase, "cfg.toml", {"train.lamb_eps=1e-12", "train.lars_eta=1"});
  EXPECT_DOUBLE_EQ(small.step.optimizer.lamb.eps, 1e-12);
  EXPECT_DOUBLE_EQ(small.step.optimizer.lars.eta, 1.0);
}

TEST(Config, AWarmUpPastTheRunIsRefusedNamingBothKeysAndWhereEachWasSet) {
  const std::string file = std::string(kBase) + "[train]\nwarmup_epochs = 4\n";
  for (const std::string shape : {"cosine", "poly"}) {
    const auto e = error_of(file, {"train.lr_schedule=" + shape, "train.epochs=3"});
    EXPECT_EQ(e.rfind("cfg.toml:4:17: train.warmup_epochs = 4 is past train.epochs = 3 (set at override "
                      "'train.epochs=3':1:14): train.lr_schedule = \"" + shape + "\"", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    // As long as the run: it warms up throughout and ends at train.lr.
    EXPECT_NO_THROW(parse_config_string(file, "cfg.toml", {"train.lr_schedule=" + shape, "train.epochs=4"})) << shape;
  }
  const auto triangle = error_of(file, {"train.lr_schedule=triangular", "train.epochs=4"});
  EXPECT_EQ(triangle.rfind("cfg.toml:4:17: train.warmup_epochs = 4 is not before train.epochs = 4 (set at override "
                           "'train.epochs=4':1:14): train.lr_schedule = \"triangular\" peaks", 0), 0u) << triangle;
}

TEST(Config, AFloorAboveThePeakRateIsRefusedNamingBothKeysAndWhereEachWasSet) {
  const std::string file = std::string(kBase) + "[train]\nmin_lr = 0.2\n";
  const auto e = error_of(file, {"train.lr=0.1"});
  EXPECT_EQ(e.rfind("cfg.toml:4:10: train.min_lr = 0.2 is above train.lr = 0.1 (set at override 'train.lr=0.1':1:10)", 0), 0u)
      << e;
  const auto by_default = error_of(file);
  EXPECT_NE(by_default.find("is above train.lr = 0.1 (its default)"), std::string::npos) << by_default;
  EXPECT_NO_THROW(parse_config_string(file, "cfg.toml", {"train.lr=0.2"}));  // a constant rate
}

// Located where the user set the key at fault, never at the file's 1:1 for a key left at its default.
TEST(Config, ASideScheduleErrorIsLocatedAtTheKeyTheUserSet) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"data.image_size_max=64"},
       "override 'data.image_size_max=64':1:21: data.image_size_max (the data.image_size schedule): the ramp needs both"},
      {{"data.image_size_min=64"}, "override 'data.image_size_min=64':1:21: data.image_size_min (the"},
      {{"data.image_size_min=64", "data.image_size_by_epoch=\"64*2\""},
       "override 'data.image_size_by_epoch=\"64*2\"':1:26: data.image_size_by_epoch (the"},
      {{"data.image_size_min=128", "data.image_size_max=64"}, "override 'data.image_size_min=128':1:21: data.image_size_min (the"},
      {{"data.image_size_min=64", "data.image_size_max=128", "data.ramp_start=3"},
       "override 'data.ramp_start=3':1:17: data.ramp_start (the"},
  };
  for (const auto& [overrides, message] : cases) {
    const auto e = error_of(kBase, overrides);
    EXPECT_EQ(e.rfind(message, 0), 0u) << e;
  }
  const auto file = error_of(std::string(kBase) + "image_size_max = 64\n");
  EXPECT_EQ(file.rfind("cfg.toml:3:18: data.image_size_max (the", 0), 0u) << file;
}

}  // namespace
}  // namespace pinfeed::app

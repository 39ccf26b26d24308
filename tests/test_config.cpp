#include <gtest/gtest.h>

#include <fstream>

#include "app/config.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

const char* kBase = "[data]\nroot = \"/data\"\n";

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config_string(text, "cfg.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesEverySectionIntoOptionStructs) {
  const Config c = parse_config_string(std::string(kBase) +
                                           "image_size = 64\n[model]\nnum_classes = 7\n[train]\nlr = 0.5\nepochs = 3\n"
                                           "nesterov = true\nprecision = \"bf16\"\n[pipeline]\nmode = \"dual_stream\"\n"
                                           "transfer_dtype = \"uint8\"\n[run]\nname = \"x\"\nlog_steps = true\n",
                                       "cfg.toml");
  EXPECT_EQ(c.data.root, "/data");
  EXPECT_EQ(c.data.image_size, 64);
  EXPECT_EQ(c.model.num_classes, 7);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_TRUE(c.train.nesterov);
  EXPECT_EQ(c.train.precision, "bf16");
  EXPECT_TRUE(c.run.log_steps);
  const auto p = pipeline_options(c);
  EXPECT_TRUE(p.pin_memory);
  EXPECT_TRUE(p.non_blocking);
  EXPECT_EQ(p.prefetch, pipeline::Prefetch::kDualStream);
  EXPECT_EQ(p.transfer_dtype, pipeline::TransferDtype::kUint8);
}

TEST(Config, IntegerIsAcceptedWhereAFloatIsExpected) {
  EXPECT_DOUBLE_EQ(parse_config_string(std::string(kBase) + "[train]\nlr = 1\n", "cfg.toml").train.lr, 1.0);
}

TEST(Config, UnknownKeyIsReportedWithFileLineColumn) {
  EXPECT_EQ(error_of(std::string(kBase) + "[train]\nlearning_rate = 0.1\n").rfind("cfg.toml:4:1: unknown key 'train.learning_rate'", 0), 0u)
      << error_of(std::string(kBase) + "[train]\nlearning_rate = 0.1\n");
}

TEST(Config, UnknownSectionIsReported) {
  EXPECT_NE(error_of(std::string(kBase) + "[optim]\nlr = 0.1\n").find("cfg.toml:4:1: unknown section [optim]"), std::string::npos);
}

TEST(Config, WrongTypeNamesKeyAndBothTypes) {
  const auto e = error_of(std::string(kBase) + "[train]\nepochs = \"ten\"\n");
  EXPECT_NE(e.find("cfg.toml:4:10: train.epochs must be a integer, got a string"), std::string::npos) << e;
}

TEST(Config, ImpossibleValueIsRejected) {
  EXPECT_NE(error_of(std::string(kBase) + "[train]\nbatch_size = 0\n").find("cfg.toml:4:14: train.batch_size must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "[train]\nmomentum = 1.0\n").find("train.momentum must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "[train]\ndevice = \"gpu\"\n").find("train.device must be"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "[pipeline]\nmode = \"fast\"\n").find("pipeline.mode must be one of pageable"), std::string::npos);
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
  const auto e = error_of(std::string(kBase) + "[pipeline]\nprefetch = \"dual_stream\"\nnon_blocking = true\n");
  EXPECT_NE(e.find("needs pipeline.pin_memory = true"), std::string::npos) << e;
}

TEST(Config, OverridesUseTomlValueSyntaxAndTheSameChecks) {
  const Config c = parse_config_string(kBase, "cfg.toml", {"train.lr=0.25", "run.name=\"abc\"", "data.root=/other"});
  EXPECT_DOUBLE_EQ(c.train.lr, 0.25);
  EXPECT_EQ(c.run.name, "abc");
  EXPECT_EQ(c.data.root, "/other");  // a bare word is accepted for a string key
  EXPECT_NE(error_of(kBase, {"train.epochs=zero"}).find("override 'train.epochs=zero':1:"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"train.epochs=-1"}).find("train.epochs must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"train.nope=1"}).find("unknown key 'train.nope'"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"novalue"}).find("expected section.key=value"), std::string::npos);
}

TEST(Config, MissingFileIsAConfigError) {
  EXPECT_THROW(load_config("/nonexistent/pinfeed.toml"), ConfigError);
}

TEST(Config, ResolvedConfigRoundTrips) {
  const Config c = parse_config_string(std::string(kBase) + "[train]\nlr = 0.3\n[pipeline]\nmode = \"pinned\"\n", "cfg.toml");
  const Config again = parse_config_string(to_toml(c), "resolved.toml");
  EXPECT_DOUBLE_EQ(again.train.lr, 0.3);
  EXPECT_EQ(again.pipeline.mode, "pinned");
  EXPECT_EQ(to_toml(again), to_toml(c));
}

TEST(Config, ShippedConfigsParse) {
  for (const char* name : {"quickstart.toml", "resnet50_imagenet.toml", "bench_resnet50.toml"}) {
    EXPECT_NO_THROW(load_config(std::string(PINFEED_SOURCE_DIR) + "/configs/" + name)) << name;
  }
}

TEST(Config, EveryKeyHasHelp) {
  for (const auto& k : config_keys()) EXPECT_FALSE(k.help.empty()) << k.name;
}

}  // namespace
}  // namespace pinfeed::app

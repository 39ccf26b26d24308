#include <gtest/gtest.h>

#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>

#include <filesystem>

#include "app/checkpoint.h"
#include "app/run_files.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

TEST(Checkpoint, RoundTripIsBitIdentical) {
  const std::string dir = test::fresh_dir("ckpt");
  Checkpoint c;
  c.model["conv1.weight"] = at::randn({4, 3, 3, 3});
  c.model["bn1.running_mean"] = at::randn({4});
  c.optimizer["conv1.weight"] = at::randn({4, 3, 3, 3});
  c.epoch = 3;
  c.step_in_epoch = 17;
  c.global_step = 1234;
  c.torch_rng = at::randn({8});
  c.config = "[train]\nlr = 0.1\n";
  save_checkpoint(dir + "/last.pt", c);
  EXPECT_FALSE(std::filesystem::exists(dir + "/last.pt.tmp"));
  const Checkpoint r = load_checkpoint(dir + "/last.pt");
  ASSERT_EQ(r.model.size(), 2u);
  for (const auto& [k, v] : c.model) EXPECT_TRUE(at::equal(v, r.model.at(k))) << k;
  EXPECT_TRUE(at::equal(c.optimizer.at("conv1.weight"), r.optimizer.at("conv1.weight")));
  EXPECT_TRUE(at::equal(c.torch_rng, r.torch_rng));
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.step_in_epoch, 17);
  EXPECT_EQ(r.global_step, 1234);
  EXPECT_EQ(r.config, c.config);
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousFileIntact) {
  const std::string dir = test::fresh_dir("ckpt_fail");
  write_file_atomic(dir + "/last.pt", std::string("old"));
  std::filesystem::create_directory(dir + "/last.pt.tmp");  // makes the temp file impossible to create
  EXPECT_THROW(write_file_atomic(dir + "/last.pt", std::string("new")), OutputError);
  EXPECT_EQ(std::string(read_file_bytes(dir + "/last.pt").data(), 3), "old");
}

TEST(Checkpoint, NotACheckpointIsRefused) {
  const std::string dir = test::fresh_dir("ckpt_bad");
  write_file_atomic(dir + "/x.pt", std::string("not a zip"));
  EXPECT_THROW(load_checkpoint(dir + "/x.pt"), std::runtime_error);
}

}  // namespace
}  // namespace pinfeed::app

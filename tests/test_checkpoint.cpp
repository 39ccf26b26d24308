#include <gtest/gtest.h>

#include <ATen/core/Dict.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>

#include "app/run/checkpoint.h"
#include "app/run/run_files.h"
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
  c.batch_size = 32;
  c.train_images = 1000;
  c.steps_per_epoch = 31;
  c.torch_rng = at::randn({8});
  c.epoch_loss_sums = at::randn({2}, at::kDouble);
  c.rank_buffers = at::randn({2, 6});
  c.loss_scaler = {{"scale", at::tensor(32768.0f)}, {"growth_tracker", at::tensor(17, at::kInt)},
                   {"skipped_steps", at::tensor(3.0, at::kDouble)}};
  c.config = "[train]\nlr = 0.1\n";
  save_checkpoint(dir + "/last.pt", c);
  EXPECT_FALSE(std::filesystem::exists(dir + "/last.pt.tmp"));
  const Checkpoint r = load_checkpoint(dir + "/last.pt");
  ASSERT_EQ(r.model.size(), 2u);
  for (const auto& [k, v] : c.model) EXPECT_TRUE(at::equal(v, r.model.at(k))) << k;
  EXPECT_TRUE(at::equal(c.optimizer.at("conv1.weight"), r.optimizer.at("conv1.weight")));
  EXPECT_TRUE(at::equal(c.torch_rng, r.torch_rng));
  EXPECT_TRUE(at::equal(c.epoch_loss_sums, r.epoch_loss_sums));
  EXPECT_TRUE(at::equal(c.rank_buffers, r.rank_buffers));
  ASSERT_EQ(r.loss_scaler.size(), 3u);
  for (const auto& [k, v] : c.loss_scaler) EXPECT_TRUE(at::equal(v, r.loss_scaler.at(k))) << k;
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.step_in_epoch, 17);
  EXPECT_EQ(r.global_step, 1234);
  EXPECT_EQ(r.batch_size, 32);
  EXPECT_EQ(r.train_images, 1000);
  EXPECT_EQ(r.steps_per_epoch, 31);
  EXPECT_EQ(r.config, c.config);
  EXPECT_EQ(r.format_version, 2);
}

// torch.load's weights_only unpickler (the default since PyTorch 2.6) refuses any global outside its allow list;
// tests/check_torch_load.py loads a real checkpoint with it.
TEST(Checkpoint, FileNamesNoTorchScriptGlobal) {
  const std::string dir = test::fresh_dir("ckpt_tags");
  Checkpoint c;
  c.model["fc.weight"] = at::randn({2, 4});
  save_checkpoint(dir + "/last.pt", c);
  const std::vector<char> bytes = read_file_bytes(dir + "/last.pt");
  const std::string text(bytes.begin(), bytes.end());  // the zip stores data.pkl uncompressed
  EXPECT_NE(text.find("_rebuild_tensor_v2"), std::string::npos);
  EXPECT_EQ(text.find("torch.jit"), std::string::npos);
  EXPECT_EQ(text.find("restore_type_tag"), std::string::npos);
}

// What pinfeed wrote before format 2: torch::jit::pickle_save of typed dicts, without the recorded sizes.
TEST(Checkpoint, Format1FilesStillLoadWithoutTheirSizes) {
  const std::string dir = test::fresh_dir("ckpt_v1");
  c10::impl::GenericDict model(c10::StringType::get(), c10::TensorType::get());
  model.insert("conv1.weight", at::randn({4, 3, 3, 3}));
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format_version", int64_t{1});
  d.insert("model", model);
  d.insert("optimizer", c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get()));
  d.insert("epoch", int64_t{2});
  d.insert("step_in_epoch", int64_t{5});
  d.insert("global_step", int64_t{25});
  d.insert("world_size", int64_t{1});
  d.insert("config", std::string("[train]\n"));
  const std::vector<char> bytes = torch::jit::pickle_save(d);
  write_file_atomic(dir + "/old.pt", bytes.data(), bytes.size());
  const Checkpoint r = load_checkpoint(dir + "/old.pt");
  EXPECT_EQ(r.format_version, 1);
  EXPECT_EQ(r.epoch, 2);
  EXPECT_EQ(r.step_in_epoch, 5);
  EXPECT_TRUE(at::equal(r.model.at("conv1.weight"), model.at("conv1.weight").toTensor()));
  EXPECT_EQ(r.batch_size, 0) << "not recorded";
}

TEST(Checkpoint, ANewerFormatIsRefusedSayingSo) {
  const std::string dir = test::fresh_dir("ckpt_v9");
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format_version", int64_t{9});
  const std::vector<char> bytes = torch::jit::pickle_save(d);
  write_file_atomic(dir + "/new.pt", bytes.data(), bytes.size());
  try {
    load_checkpoint(dir + "/new.pt");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("format 9: a newer pinfeed wrote it"), std::string::npos) << e.what();
  }
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

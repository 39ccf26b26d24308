#include <gtest/gtest.h>

#include <ATen/core/Dict.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/checkpoint/checkpoint.h"
#include "engine/errors.h"
#include "app/config/config.h"
#include "app/run/run_files.h"
#include "data/error.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

TEST(Checkpoint, RoundTripIsBitIdentical) {
  const std::string dir = test::fresh_dir("ckpt");
  engine::Checkpoint c;
  c.model["conv1.weight"] = at::randn({4, 3, 3, 3});
  c.model["bn1.running_mean"] = at::randn({4});
  c.optimizer["conv1.weight"] = at::randn({4, 3, 3, 3});
  c.epoch = 3;
  c.step_in_epoch = 17;
  c.global_step = 3 * 31 + 17;  // epoch x steps_per_epoch + step_in_epoch, as every pinfeed checkpoint
  c.batch_size = 32;
  c.train_images = 1000;
  c.steps_per_epoch = 31;
  c.torch_rng = at::randn({8});
  c.epoch_loss_sums = at::randn({2}, at::kDouble);
  c.rank_buffers = at::randn({2, 6});
  c.loss_scaler = {{"scale", at::tensor(32768.0f)}, {"growth_tracker", at::tensor(17, at::kInt)},
                   {"skipped_steps", at::tensor(3.0, at::kDouble)}};
  c.config = "[train]\nlr = 0.1\n";
  c.classes = {"cat", "dog"};
  c.best_val_top1 = 0.625;
  engine::save_checkpoint(dir + "/last.pt", c);
  EXPECT_FALSE(std::filesystem::exists(dir + "/last.pt.tmp"));
  const engine::Checkpoint r = engine::load_checkpoint(dir + "/last.pt");
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
  EXPECT_EQ(r.global_step, 110);
  EXPECT_EQ(r.batch_size, 32);
  EXPECT_EQ(r.train_images, 1000);
  EXPECT_EQ(r.steps_per_epoch, 31);
  EXPECT_EQ(r.config, c.config);
  EXPECT_EQ(r.classes, c.classes);
  EXPECT_EQ(r.best_val_top1, 0.625);
  EXPECT_EQ(r.format_version, 2);
}

// torch.load's weights_only unpickler (the default since PyTorch 2.6) refuses any global outside its allow list;
// tests/check_torch_load.py loads a real checkpoint with it.
TEST(Checkpoint, FileNamesNoTorchScriptGlobal) {
  const std::string dir = test::fresh_dir("ckpt_tags");
  engine::Checkpoint c;
  c.model["fc.weight"] = at::randn({2, 4});
  engine::save_checkpoint(dir + "/last.pt", c);
  const std::vector<char> bytes = engine::read_file_bytes(dir + "/last.pt");
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
  engine::write_file_atomic(dir + "/old.pt", bytes.data(), bytes.size());
  const engine::Checkpoint r = engine::load_checkpoint(dir + "/old.pt");
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
  engine::write_file_atomic(dir + "/new.pt", bytes.data(), bytes.size());
  try {
    engine::load_checkpoint(dir + "/new.pt");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("format 9: a newer pinfeed wrote it"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousFileIntact) {
  const std::string dir = test::fresh_dir("ckpt_fail");
  engine::write_file_atomic(dir + "/last.pt", std::string("old"));
  std::filesystem::create_directory(dir + "/last.pt.tmp");  // makes the temp file impossible to create
  EXPECT_THROW(engine::write_file_atomic(dir + "/last.pt", std::string("new")), engine::OutputError);
  EXPECT_EQ(std::string(engine::read_file_bytes(dir + "/last.pt").data(), 3), "old");
}

TEST(Checkpoint, NotACheckpointIsRefusedAsAUsageError) {
  const std::string dir = test::fresh_dir("ckpt_bad");
  engine::write_file_atomic(dir + "/x.pt", std::string("not a zip"));
  EXPECT_NE(test::message_of<engine::CheckpointError>([&] { engine::load_checkpoint(dir + "/x.pt"); }).find("not a zip archive"),
            std::string::npos);
}

engine::Checkpoint small_checkpoint() {
  engine::Checkpoint c;
  c.model["fc.weight"] = at::randn({2, 4});
  c.model["fc.bias"] = at::randn({2});
  c.batch_size = 4;
  c.train_images = 8;
  c.steps_per_epoch = 2;
  c.config = "[train]\n";
  return c;
}

TEST(Checkpoint, AMissingFileADirectoryAFifoAndADeviceAreRefusedBeforeAnyRead) {
  const std::string dir = test::fresh_dir("ckpt_special");
  ASSERT_EQ(::mkfifo((dir + "/fifo.pt").c_str(), 0600), 0);  // no writer: a blocking open would wait for ever
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir + "/missing.pt", "no such file"},
      {dir, "a directory"},
      {dir + "/fifo.pt", "FIFO"},
      {"/dev/zero", "device"},
  };
  for (const auto& [path, said] : cases) {
    const std::string message = test::message_of<engine::CheckpointError>([&] { engine::load_checkpoint(path); });
    EXPECT_NE(message.find(said), std::string::npos) << path << ": " << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
  }
}

TEST(Checkpoint, ATruncatedFileIsADataErrorSayingSo) {
  const std::string dir = test::fresh_dir("ckpt_cut");
  engine::save_checkpoint(dir + "/last.pt", small_checkpoint());
  const auto size = std::filesystem::file_size(dir + "/last.pt");
  for (const auto keep : {size / 2, size - 30, uintmax_t{100}}) {
    std::filesystem::copy_file(dir + "/last.pt", dir + "/cut.pt", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(dir + "/cut.pt", keep);
    const std::string message = test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/cut.pt"); });
    EXPECT_NE(message.find("truncated"), std::string::npos) << keep << ": " << message;
  }
}

TEST(Checkpoint, AFlippedByteInATensorIsRefusedNamingTheEntry) {
  const std::string dir = test::fresh_dir("ckpt_flip");
  engine::save_checkpoint(dir + "/last.pt", small_checkpoint());
  std::ifstream in(dir + "/last.pt", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The first entry (a tensor's storage): its data follows the local header, its name and its extra field.
  ASSERT_EQ(bytes.compare(0, 4, "PK\x03\x04"), 0);
  const auto u16 = [&](size_t at) { return static_cast<uint8_t>(bytes[at]) | static_cast<uint8_t>(bytes[at + 1]) << 8; };
  ASSERT_NE(bytes.compare(30, u16(26), "archive/data/0"), 1);
  bytes[30 + u16(26) + u16(28) + 5] ^= 0x10;
  std::ofstream(dir + "/flipped.pt", std::ios::binary) << bytes;
  const std::string message = test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/flipped.pt"); });
  EXPECT_NE(message.find("CRC-32"), std::string::npos) << message;
  EXPECT_NE(message.find("data/0"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_weights(dir + "/flipped.pt"); }).find("CRC-32"), std::string::npos);
}

TEST(Checkpoint, NonFiniteWeightsAreRefusedNamingTheKey) {
  const std::string dir = test::fresh_dir("ckpt_nan");
  engine::Checkpoint c = small_checkpoint();
  c.model["fc.bias"][1] = NAN;
  engine::save_checkpoint(dir + "/nan.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/nan.pt"); }).find("model.fc.bias holds NaN"),
            std::string::npos);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_weights(dir + "/nan.pt"); }).find("fc.bias"), std::string::npos);
}

TEST(Checkpoint, ImpossiblePositionsAreRefusedNamingTheKey) {
  const std::string dir = test::fresh_dir("ckpt_position");
  engine::Checkpoint c = small_checkpoint();
  c.epoch = -1;
  engine::save_checkpoint(dir + "/a.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/a.pt"); }).find("epoch = -1"), std::string::npos);
  c = small_checkpoint();
  c.world_size = 0;
  engine::save_checkpoint(dir + "/b.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/b.pt"); }).find("world_size = 0"),
            std::string::npos);
  c = small_checkpoint();
  c.step_in_epoch = 5;  // of 2
  engine::save_checkpoint(dir + "/c.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/c.pt"); }).find("step_in_epoch = 5"),
            std::string::npos);
  // Positive but impossible: an epoch past train.epochs' bound; a global step that is not the epochs' steps.
  c = small_checkpoint();
  c.epoch = int64_t{1} << 40;
  engine::save_checkpoint(dir + "/d.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/d.pt"); }).find("epoch = 1099511627776 is impossible"),
            std::string::npos);
  c = small_checkpoint();
  c.epoch = 50;
  c.global_step = 10;
  engine::save_checkpoint(dir + "/e.pt", c);
  const std::string e = test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/e.pt"); });
  EXPECT_NE(e.find(dir + "/e.pt: damaged checkpoint: global_step = 10 does not match epoch 50 x steps_per_epoch 2"),
            std::string::npos)
      << e;
}

// The momentum buffers are the parameters': one each, of its shape.
TEST(Checkpoint, OptimizerStateThatDoesNotFitTheModelIsRefusedNamingTheEntry) {
  const std::string dir = test::fresh_dir("ckpt_optimizer");
  engine::Checkpoint c = small_checkpoint();
  c.optimizer["fc.weight"] = at::randn({2, 4});
  c.optimizer["fc.bias"] = at::randn({3});
  engine::save_checkpoint(dir + "/a.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/a.pt"); })
                .find("optimizer.fc.bias has shape [3], its parameter [2]"),
            std::string::npos);
  c.optimizer.erase("fc.bias");
  engine::save_checkpoint(dir + "/b.pt", c);
  // A missing entry is known to be damage once the model's names are known to be the network's (a resume).
  const engine::Checkpoint lacking = engine::load_checkpoint(dir + "/b.pt");
  EXPECT_NE(test::message_of<DataError>([&] { engine::check_optimizer_covers_model(lacking, lacking.path); })
                .find(dir + "/b.pt: damaged checkpoint: optimizer lacks the momentum buffer of fc.bias"),
            std::string::npos);
  c.optimizer["layer9.weight"] = at::randn({1});
  engine::save_checkpoint(dir + "/c.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/c.pt"); })
                .find("optimizer.layer9.weight belongs to no parameter"),
            std::string::npos);
}

// LAMB's state: two moments per parameter under "<kind>/<name>" and its step; the EMA and best.pt's raw
// weights beside `model`; which optimizer and which weights. An older file (no optimizer_name) is SGD's.
TEST(Checkpoint, OptimizerNameLambStateEmaAndBestWeightsRoundTrip) {
  const std::string dir = test::fresh_dir("ckpt_lamb_ema");
  engine::Checkpoint c = small_checkpoint();
  EXPECT_EQ(c.optimizer_name, "sgd");
  for (const char* kind : {"exp_avg/", "exp_avg_sq/"}) {
    for (const auto& [name, t] : c.model) c.optimizer[kind + name] = at::randn(t.sizes());
  }
  c.optimizer["step"] = at::tensor(7.0f);
  c.optimizer_name = "lamb";
  for (const auto& [name, t] : c.model) c.model_ema[name] = at::randn(t.sizes());
  c.model_raw = c.model;
  c.ema_updates = 14;
  c.best_weights = "ema";
  engine::save_checkpoint(dir + "/best.pt", c);
  const engine::Checkpoint r = engine::load_checkpoint(dir + "/best.pt");
  EXPECT_EQ(r.optimizer_name, "lamb");
  ASSERT_EQ(r.optimizer.size(), 5u);
  for (const auto& [k, v] : c.optimizer) EXPECT_TRUE(at::equal(v, r.optimizer.at(k))) << k;
  for (const auto& [k, v] : c.model_ema) EXPECT_TRUE(at::equal(v, r.model_ema.at(k))) << k;
  for (const auto& [k, v] : c.model_raw) EXPECT_TRUE(at::equal(v, r.model_raw.at(k))) << k;
  EXPECT_EQ(r.ema_updates, 14);
  EXPECT_EQ(r.best_weights, "ema");

  engine::Checkpoint plain = small_checkpoint();
  engine::save_checkpoint(dir + "/plain.pt", plain);
  const engine::Checkpoint p = engine::load_checkpoint(dir + "/plain.pt");
  EXPECT_EQ(p.optimizer_name, "sgd");
  EXPECT_TRUE(p.model_ema.empty() && p.model_raw.empty());
  EXPECT_EQ(p.best_weights, "");

  c.optimizer.erase("exp_avg_sq/fc.bias");
  engine::save_checkpoint(dir + "/a.pt", c);
  const engine::Checkpoint lacking = engine::load_checkpoint(dir + "/a.pt");
  EXPECT_NE(test::message_of<DataError>([&] { engine::check_optimizer_covers_model(lacking, lacking.path); })
                .find("optimizer lacks exp_avg_sq/fc.bias"),
            std::string::npos);
  c.optimizer["exp_avg_sq/fc.bias"] = at::randn({2});
  c.model_ema.erase("fc.bias");
  engine::save_checkpoint(dir + "/b.pt", c);
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_checkpoint(dir + "/b.pt"); }).find("model_ema lacks fc.bias"),
            std::string::npos);
}

// A pickle as Python writes it, opcode by opcode (protocol 2, what torch.save uses), in torch.save's zip.
struct PickleText {
  std::string bytes = std::string("\x80\x02", 2);
  PickleText& op(char c) { bytes += c; return *this; }
  PickleText& global(const std::string& module, const std::string& name) { bytes += "c" + module + "\n" + name + "\n"; return *this; }
  PickleText& str(const std::string& s) {
    bytes += 'X';
    const uint32_t n = static_cast<uint32_t>(s.size());
    bytes.append(reinterpret_cast<const char*>(&n), 4);
    bytes += s;
    return *this;
  }
  PickleText& small(uint8_t v) { bytes += 'K'; bytes += static_cast<char>(v); return *this; }
};

void write_torch_zip(const std::string& path, const std::string& pickle, const std::vector<float>& storage) {
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* b, size_t n) {
    out.insert(out.end(), static_cast<const char*>(b), static_cast<const char*>(b) + n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("data/0", storage.data(), storage.size() * sizeof(float));
  writer.writeEndOfFile();
  engine::write_file_atomic(path, out.data(), out.size());
}

// torch.save(OrderedDict(fc.weight=tensor((2, 3)))) with the _metadata attribute every state_dict() carries:
// LibTorch's own unpickler turns the OrderedDict into None and fails an internal assert on it.
std::string state_dict_pickle() {
  PickleText p;
  p.global("collections", "OrderedDict").op(')').op('R').op('(');
  p.str("fc.weight").global("torch._utils", "_rebuild_tensor_v2").op('(');
  p.op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu").small(6).op('t').op('Q');
  p.small(0).small(2).small(3).op('\x86').small(3).small(1).op('\x86').op('\x89');
  p.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  p.op('u').op('}').str("_metadata").op('}').op('s').op('b').op('.');
  return p.bytes;
}

TEST(Checkpoint, AStateDictFromPythonLoadsAsWeightsAndResumeNamesInitFrom) {
  const std::string dir = test::fresh_dir("ckpt_state_dict");
  write_torch_zip(dir + "/sd.pt", state_dict_pickle(), {1, 2, 3, 4, 5, 6});
  const engine::Weights w = engine::load_weights(dir + "/sd.pt");
  EXPECT_FALSE(w.checkpoint);
  EXPECT_TRUE(w.classes.empty());
  ASSERT_EQ(w.model.size(), 1u);
  const at::Tensor t = w.model.at("fc.weight");
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t[1][2].item<float>(), 6.0f);
  EXPECT_NE(test::message_of<engine::CheckpointError>([&] { engine::load_checkpoint(dir + "/sd.pt"); }).find("train.init_from"),
            std::string::npos);
}

TEST(Checkpoint, AStorageShorterThanItsTensorIsRefused) {
  const std::string dir = test::fresh_dir("ckpt_short_storage");
  write_torch_zip(dir + "/sd.pt", state_dict_pickle(), {1, 2, 3});  // 3 floats for a (2, 3) tensor
  EXPECT_NE(test::message_of<DataError>([&] { engine::load_weights(dir + "/sd.pt"); }).find("fewer than its 6 elements"),
            std::string::npos);
}

TEST(Checkpoint, APickleNamingAnythingButPlainDataIsRefusedNamingIt) {
  const std::string dir = test::fresh_dir("ckpt_foreign");
  PickleText p;
  p.global("os", "system").str("true").op('\x85').op('R').op('.');
  write_torch_zip(dir + "/evil.pt", p.bytes, {});
  EXPECT_NE(test::message_of<engine::CheckpointError>([&] { engine::load_weights(dir + "/evil.pt"); }).find("names os.system"),
            std::string::npos);
}

}  // namespace
}  // namespace pinfeed::app

// The background checkpoint writer: what save() was given is what the file holds, whatever the caller does to its
// tensors afterwards; saves are written one after the other; a failed write is thrown by the next save or wait,
// and logged when nothing took it.
#include <gtest/gtest.h>

#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/checkpoint/checkpoint_writer.h"
#include "app/run/run_files.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

engine::Checkpoint small_checkpoint(int64_t epoch) {
  engine::Checkpoint c;
  c.model["conv1.weight"] = at::randn({4, 3, 3, 3});
  c.model["bn1.running_mean"] = at::randn({4});
  c.optimizer["conv1.weight"] = at::randn({4, 3, 3, 3});
  c.model_ema = c.model;  // the same tensors as `model`, as in best.pt with the EMA's weights
  c.epoch = epoch;
  c.torch_rng = at::randn({8});
  c.config = "[train]\nlr = 0.1\n";
  return c;
}

TEST(CheckpointWriter, TheFileHoldsTheTensorsAsTheyWereWhenSaveReturned) {
  const std::string dir = test::fresh_dir("ckpt_writer");
  engine::Checkpoint c = small_checkpoint(3);
  std::map<std::string, at::Tensor> model, optimizer;  // the values handed over
  for (const auto& [name, t] : c.model) model[name] = t.clone();
  for (const auto& [name, t] : c.optimizer) optimizer[name] = t.clone();
  const at::Tensor rng = c.torch_rng.clone();
  engine::CheckpointWriter writer;
  writer.save({{dir + "/best.pt", c}, {dir + "/last.pt", c}});
  for (auto* tensors : {&c.model, &c.optimizer}) {
    for (auto& [name, t] : *tensors) t.add_(1);  // training goes on in place while the files are written
  }
  c.torch_rng.add_(1);
  writer.wait();
  for (const char* file : {"/best.pt", "/last.pt"}) {
    const engine::Checkpoint r = engine::load_checkpoint(dir + file);
    EXPECT_EQ(r.epoch, 3) << file;
    ASSERT_EQ(r.model.size(), model.size()) << file;
    for (const auto& [name, t] : model) EXPECT_TRUE(at::equal(r.model.at(name), t)) << file << " " << name;
    for (const auto& [name, t] : model) EXPECT_TRUE(at::equal(r.model_ema.at(name), t)) << file << " " << name;
    for (const auto& [name, t] : optimizer) EXPECT_TRUE(at::equal(r.optimizer.at(name), t)) << file << " " << name;
    EXPECT_TRUE(at::equal(r.torch_rng, rng)) << file;
  }
}

TEST(CheckpointWriter, SavesAreWrittenInTheOrderGiven) {
  const std::string dir = test::fresh_dir("ckpt_writer_order");
  engine::CheckpointWriter writer;
  for (int64_t epoch = 1; epoch <= 4; ++epoch) writer.save({{dir + "/last.pt", small_checkpoint(epoch)}});
  writer.wait();
  EXPECT_EQ(engine::load_checkpoint(dir + "/last.pt").epoch, 4);
  EXPECT_FALSE(std::filesystem::exists(dir + "/last.pt.tmp"));
}

// A FIFO where the temp file goes holds the first write in its open() until a reader comes, and fails it then
// (a FIFO cannot be fsynced): the save after it waits for it, then throws its error and writes nothing.
TEST(CheckpointWriter, ASaveWaitsForTheWriteBeforeItAndThrowsItsError) {
  const std::string dir = test::fresh_dir("ckpt_writer_wait");
  const std::string fifo = dir + "/a.pt.tmp";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  engine::CheckpointWriter writer;
  writer.save({{dir + "/a.pt", small_checkpoint(1)}});  // returns: the writer thread waits in open()
  std::atomic<bool> second_returned{false};
  std::string second_error;
  std::thread second([&] {
    try {
      writer.save({{dir + "/b.pt", small_checkpoint(2)}});
    } catch (const engine::OutputError& e) {
      second_error = e.what();
    }
    second_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // time to return, if it did not wait
  EXPECT_FALSE(second_returned);
  const int fd = ::open(fifo.c_str(), O_RDONLY);  // lets the first write through
  ASSERT_GE(fd, 0);
  char block[4096];
  while (::read(fd, block, sizeof block) > 0) {
  }
  ::close(fd);
  second.join();
  EXPECT_NE(second_error.find("cannot flush " + fifo), std::string::npos) << second_error;
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.pt"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/b.pt"));
  writer.wait();  // the error was thrown once: nothing more to say
}

TEST(CheckpointWriter, AFailedWriteIsThrownByWaitOnceAndLoggedWhenNothingTookIt) {
  const std::string dir = test::fresh_dir("ckpt_writer_fail");
  {
    engine::CheckpointWriter writer;
    writer.save({{dir + "/missing/last.pt", small_checkpoint(1)}});
    const std::string message = test::message_of<engine::OutputError>([&] { writer.wait(); });
    EXPECT_NE(message.find("cannot create " + dir + "/missing/last.pt.tmp"), std::string::npos) << message;
    writer.wait();
    writer.save({{dir + "/last.pt", small_checkpoint(2)}});  // the writer goes on after a failed write
    writer.wait();
    EXPECT_EQ(engine::load_checkpoint(dir + "/last.pt").epoch, 2);
  }
  ::testing::internal::CaptureStderr();
  {
    engine::CheckpointWriter writer;
    writer.save({{dir + "/missing/best.pt", small_checkpoint(1)}, {dir + "/last.pt", small_checkpoint(3)}});
  }  // the end of a run cut short by another error: the write is waited for, its error said
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("a checkpoint was not written: cannot create " + dir + "/missing/best.pt.tmp"),
            std::string::npos) << said;
  EXPECT_EQ(engine::load_checkpoint(dir + "/last.pt").epoch, 2) << "the files after the failed one are not written";
}

}  // namespace
}  // namespace pinfeed::app

// Ctrl-C and SIGTERM: during start-up the first ends the process at once (130); in training the first asks to
// stop and a second ends the process at once, removing the temp file of a write in progress. Each immediate stop
// says in one line that nothing was saved.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/signals.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

TEST(Signals, TheFirstSignalDuringStartUpExitsAt130SayingNothingWasSaved) {
  EXPECT_EXIT(
      {
        engine::install_signal_handlers();
        std::raise(SIGINT);
        std::exit(0);  // not reached
      },
      ::testing::ExitedWithCode(130), "interrupted during start-up: nothing was saved");
}

TEST(Signals, TheFirstSignalInTrainingOnlyRequestsAStop) {
  EXPECT_EXIT(
      {
        engine::install_signal_handlers();
        engine::training_started();
        std::raise(SIGTERM);
        std::exit(engine::signal_stop().requested() ? 7 : 0);
      },
      ::testing::ExitedWithCode(7), "");
}

// Two writes in progress: the checkpoint writer's and one of the training thread's.
TEST(Signals, ASecondSignalRemovesTheTempFilesOfTheWritesAndSaysNothingWasSaved) {
  const std::string dir = test::fresh_dir("signal_tmp");
  const std::string checkpoint = dir + "/last.pt.tmp", record = dir + "/run.json.tmp", done = dir + "/metrics.csv.tmp";
  EXPECT_EXIT(
      {
        engine::install_signal_handlers();
        engine::training_started();
        std::raise(SIGINT);
        { engine::RemoveOnSignal finished(done); }
        std::ofstream(done) << "a write that ended";
        engine::RemoveOnSignal guard(checkpoint);
        std::ofstream(checkpoint) << "half a checkpoint";
        std::thread([&] {
          engine::RemoveOnSignal other(record);
          std::ofstream(record) << "{";
          std::raise(SIGINT);
        }).join();
        std::exit(0);  // not reached
      },
      ::testing::ExitedWithCode(130), "stopped at once by a second signal: nothing was saved");
  EXPECT_FALSE(std::filesystem::exists(checkpoint));
  EXPECT_FALSE(std::filesystem::exists(record));
  EXPECT_TRUE(std::filesystem::exists(done));
}

TEST(Signals, AStopThatNeverCompletesEndsTheProcessAfterTheDeadline) {
  EXPECT_EXIT(
      {
        engine::install_signal_handlers();
        engine::training_started(std::chrono::milliseconds(200));
        std::raise(SIGTERM);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // a teardown that waits forever
      },
      ::testing::ExitedWithCode(130), "still running after the stop was asked for");
}

}  // namespace
}  // namespace pinfeed::app

// Shared test helpers: a tiny generated ImageFolder in a temporary directory, a run's metric rows, a gate that
// holds a thread as a stuck read would.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <ftw.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <vector>

#include "data/dataset/dataset.h"
#include "data/dataset/synthetic.h"

namespace pinfeed::test {

// The directories fresh_dir made, removed once the process's tests have run (a run of every test left ~1.8 GB
// in /tmp before). At the end of RUN_ALL_TESTS: a death test's child and a rank process never get there.
// PINFEED_KEEP_TEST_DIRS=1 keeps them.
// rm -rf, without std::filesystem::remove_all: in a binary that links LibTorch that resolves to libtorch.so's
// copy, which jumps to a null pointer on a non-empty folder (seen with torch 2.11.0).
inline void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { ::remove(path); return 0; },
      16, FTW_DEPTH | FTW_PHYS);
}

struct MadeDirs {
  std::mutex mutex;
  std::vector<std::string> dirs;
};

inline MadeDirs& made_dirs() {
  static MadeDirs* dirs = new MadeDirs;  // never destroyed: see above
  return *dirs;
}

class RemoveMadeDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    MadeDirs& made = made_dirs();
    const std::lock_guard<std::mutex> lock(made.mutex);
    if (!std::getenv("PINFEED_KEEP_TEST_DIRS")) {
      for (const auto& d : made.dirs) remove_tree(d);
    }
    made.dirs.clear();
  }
};

inline ::testing::Environment* const kRemoveMadeDirs = ::testing::AddGlobalTestEnvironment(new RemoveMadeDirs);

// A fresh directory under the test temp dir, removed first if it exists. The process id keeps tests that
// ctest runs in parallel (one process each) out of each other's way.
inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("pinfeed_" + name + "_" + std::to_string(::getpid()));
  remove_tree(dir.string());
  std::filesystem::create_directories(dir);
  MadeDirs& made = made_dirs();
  const std::lock_guard<std::mutex> lock(made.mutex);
  made.dirs.push_back(dir.string());
  return dir.string();
}

// Writes a small synthetic ImageFolder (JPEG files) and returns its root.
inline std::string make_dataset(const std::string& name, int classes = 3, int train_per_class = 8,
                                int val_per_class = 2, int side = 40) {
  data::SyntheticOptions o;
  o.out = fresh_dir(name);
  o.classes = classes;
  o.train_per_class = train_per_class;
  o.val_per_class = val_per_class;
  o.width = side;
  o.height = side;
  o.threads = 2;
  data::generate_synthetic(o);
  return o.out;
}

// What `body` throws as an Error, or "" when it throws nothing: for tests of error messages.
template <class Error, class Body>
std::string message_of(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A run's metric rows (metrics.jsonl) with only the figures that do not depend on timing: what a resumed run
// must repeat exactly.
inline std::vector<nlohmann::json> learning_rows(const std::filesystem::path& metrics_jsonl) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json row = nlohmann::json::parse(line);
    nlohmann::json kept;
    for (const char* key : {"epoch", "lr", "train_loss", "val_loss", "val_top1", "val_top5", "ema_val_loss",
                            "ema_val_top1", "ema_val_top5", "best_weights", "bad_images"}) {
      kept[key] = row.at(key);
    }
    rows.push_back(kept);
  }
  return rows;
}

// Uniform noise, BGR: the worst case for JPEG size and decode time.
inline cv::Mat noise_image(int w, int h) {
  cv::Mat m(h, w, CV_8UC3);
  cv::randu(m, 0, 255);
  return m;
}

// The image encoded by OpenCV as ext (".jpg", ".png") with imwrite params.
inline std::vector<uint8_t> encode(const cv::Mat& img, const std::string& ext, const std::vector<int>& params = {}) {
  std::vector<uint8_t> bytes;
  cv::imencode(ext, img, bytes, params);
  return bytes;
}

// Loads one dataset sample at a time into a buffer of its own, as a loader worker does into a batch slot.
class SampleReader {
 public:
  explicit SampleReader(const data::Dataset& dataset) : dataset_(dataset), pixels_(dataset.image_bytes()) {}
  // Returns the samples replaced (bad images); throws what Dataset::load throws.
  int load(int64_t index, uint64_t seed = 0, int64_t epoch = 0) {
    return dataset_.load(index, seed, epoch, pixels_.data(), &label, scratch_);
  }
  int64_t label = -1;

 private:
  const data::Dataset& dataset_;
  std::vector<uint8_t> pixels_;
  data::DecodeScratch scratch_;
};

// Holds every thread that calls wait() until open(): a read that never returns, for the tests of stuck samples
// (LoaderOptions::before_load, CheckAheadOptions::before_check). Share it (a shared_ptr in the hook): a thread the
// code under test left running keeps it alive until it passes.
class Gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  // Whether a thread reached wait() within `bound`.
  bool entered(std::chrono::seconds bound = std::chrono::seconds(30)) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, bound, [&] { return entered_ > 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
  int entered_ = 0;
};

// Opens the gate when the test's scope ends, however it ends (a failed ASSERT too): no thread stays blocked.
struct OpenAtExit {
  std::shared_ptr<Gate> gate;
  ~OpenAtExit() { gate->open(); }
};

// Whether done() became true within `bound`, asked every millisecond: for an end the test cannot be told of.
template <class Done>
bool eventually(Done done, std::chrono::seconds bound = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace pinfeed::test

// What the Loader and its worker threads share (loader.cpp, loader_workers.cpp): private to data/loader/.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/loader/loader.h"

namespace pinfeed::data {
namespace loader_detail {

inline std::string seconds_text(double s) {  // "0.4", "12"
  char text[32];
  std::snprintf(text, sizeof text, s < 10 ? "%.1f" : "%.0f", s);
  return text;
}

inline std::string number_text(double v) {  // "30", "0.3"
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// An honest worker finishes its sample within sample_timeout_s of starting it: waiting longer for it is pointless.
inline double stop_wait_s(const LoaderOptions& o) {
  return o.sample_timeout_s > 0 ? std::min(kStopWait, o.sample_timeout_s) : kStopWait;
}

}  // namespace loader_detail

// What the worker threads use, owned jointly by the Loader and every worker (each holds a shared_ptr), so that a
// worker left running at shutdown (stuck in a read or inside a decoder: stop_workers detaches it) finds all it
// can still touch alive whenever it returns, the Loader long gone:
// - its own stack, DecodeScratch and EncodedImage: while it loads, the file's bytes and the decoded pixels go only
//   there (Dataset::load with a null dst, a label and an EncodedImage of its own), never into the arena;
// - this object (mutex, slots, tasks, window, options) and the dataset, which it keeps alive.
// The arena is the caller's, and may be freed once the Loader is gone. A worker writes its sample into a batch
// slot only after it has checked `stop` under the mutex and marked itself `writing`; stop_workers sets `stop`
// under the same mutex, then waits for every worker marked writing (one sample's pixels: microseconds, nothing
// there can block) before it returns. So a worker either saw `stop` and drops its sample, touching neither the
// arena nor its batch's Pending, or finished writing before the destructor returned. `check_ahead` is used under
// the mutex while `stop` is false only: the Loader destroys it after stop_workers.
struct Loader::Shared {
  struct WorkerSlot {  // one per worker, under the mutex
    int64_t sample = -1;  // dataset index being loaded, -1: none
    std::chrono::steady_clock::time_point since;  // when it took that sample
    bool writing = false;  // writing its sample into the batch slot
    bool exited = false;
  };

  Shared(std::shared_ptr<const Dataset> d, LoaderOptions o) : dataset(std::move(d)), options(std::move(o)) {}

  const std::shared_ptr<const Dataset> dataset;
  const LoaderOptions options;
  std::mutex mutex;
  std::condition_variable work_cv;  // workers: a task or stop
  std::condition_variable done_cv;  // consumer: a batch finished, workers went idle, or a worker exited
  std::deque<std::unique_ptr<Pending>> window;  // opened batches, in order
  std::deque<Task> tasks;
  int active = 0;  // tasks being worked on
  bool stop = false;
  std::vector<WorkerSlot> slots;  // sized before any worker starts, never resized
  CheckAhead* check_ahead = nullptr;
};

}  // namespace pinfeed::data

#include "data/loader/check_ahead.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

#include "common/log.h"
#include "data/loader/detached.h"

namespace pinfeed::data {
namespace {

constexpr int64_t kPositionMask = (int64_t{1} << 32) - 1;
// A rank's shuffled share of the samples leaves out a given one with probability 1 - 1/ranks each epoch: after
// this many epochs in a row without anything new, a sample is still to come with probability (7/8)^64 = 2e-4 at
// 8 ranks, and the workers check it then. Each such epoch costs an order (a shuffle of the sample indices).
constexpr int kMaxBarrenEpochs = 64;

void lower_to_idle_priority() {
  sched_param param{};
  param.sched_priority = 0;
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) != 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
  }
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

CheckWalk::CheckWalk(int64_t samples, Order order, int64_t lead)
    : samples_(samples), order_of_(std::move(order)), lead_(lead), given_(static_cast<size_t>(samples), 0) {}

void CheckWalk::begin(int64_t epoch, int64_t position) {
  if (!begun_ || epoch != epoch_) {
    std::vector<int64_t> order = order_of_(epoch);
    repeated_ = begun_ && order == order_;
    order_ = std::move(order);
  }
  begun_ = true;
  epoch_ = epoch;
  position_ = position;
  whole_ = position == 0;
  fresh_ = false;
}

std::optional<int64_t> CheckWalk::next(int64_t loader) {
  if (done_) return std::nullopt;
  const int64_t at = point(epoch_, position_);
  const int64_t epoch = loader >> 32, position = loader & kPositionMask;
  if (!begun_ || (loader > at && !fresh_) || (loader > at && epoch != epoch_)) {
    begin(epoch, position);
  } else if (loader >= at && fresh_) {
    // Level with the walk is overtaken too: the workers hold every sample it gave out, the ones being checked
    // included, and take the next the moment it gives that one out.
    begin(epoch, position + lead_);
  }
  for (;;) {
    while (position_ < static_cast<int64_t>(order_.size())) {
      const int64_t i = order_[position_++];
      if (i < 0 || i >= samples_) throw std::logic_error("CheckWalk: sample " + std::to_string(i) + " out of range");
      if (given_[i]) continue;
      given_[i] = 1;
      ++given_count_;
      fresh_ = true;
      return i;
    }
    // An order that repeats without anything new is all this walk will ever see (a rank's share, unshuffled).
    const bool barren = whole_ && !fresh_;
    if (fresh_) barren_epochs_ = 0;
    if (given_count_ == samples_ || (barren && (repeated_ || ++barren_epochs_ >= kMaxBarrenEpochs))) {
      done_ = true;
      order_ = {};
      given_ = {};
      return std::nullopt;
    }
    begin(epoch_ + 1, 0);
  }
}

// What the checking threads use, owned jointly by the CheckAhead and every thread, so that a thread left running at
// shutdown (stuck in a read or inside libjpeg: the destructor detaches it) finds all it can still touch alive
// whenever it returns: this object (the walk and its order, the mutex, the slots), the dataset it keeps alive, and
// its own DecodeScratch. It writes into nothing else: check_gpu_file records its verdict in the dataset.
struct CheckAhead::Shared {
  struct Slot {  // one per thread, under the mutex
    int64_t sample = -1;  // being checked
    std::chrono::steady_clock::time_point since;
    bool ended = false;
  };

  Shared(std::shared_ptr<const Dataset> d, CheckWalk::Order order, CheckAheadOptions o)
      : dataset(std::move(d)), options(std::move(o)), walk(dataset->size(), std::move(order), options.lead) {}

  std::optional<int64_t> claim(int id);
  void fail(std::exception_ptr error);

  const std::shared_ptr<const Dataset> dataset;
  const CheckAheadOptions options;
  std::atomic<int64_t> loader{0};  // CheckWalk::point, the furthest reported
  std::atomic<bool> stop{false};
  // Guards walk, running, slots and the writing of error; taken by the checking threads and wait(), never by the
  // loader's threads.
  std::mutex mutex;
  std::condition_variable ended;
  CheckWalk walk;
  int running = 0;
  std::vector<Slot> slots;  // sized before any thread starts, never resized
  std::exception_ptr error;  // written once, before failed
  std::atomic<bool> failed{false};
};

CheckAhead::CheckAhead(std::shared_ptr<const Dataset> dataset, CheckWalk::Order order, CheckAheadOptions options)
    : shared_(std::make_shared<Shared>(std::move(dataset), std::move(order), std::move(options))) {
  Shared& s = *shared_;
  const int n = std::max(0, s.options.threads);
  s.slots.resize(static_cast<size_t>(n));
  threads_.reserve(static_cast<size_t>(n));
  try {
    for (int i = 0; i < n; ++i) {
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        ++s.running;
      }
      threads_.emplace_back([shared = shared_, i] { run(shared, i); });
    }
  } catch (const std::exception& e) {  // std::system_error when the system refuses a thread
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      --s.running;  // the one that did not start
    }
    const size_t started = threads_.size();
    stop_threads();
    throw std::runtime_error("cannot start file check thread " + std::to_string(started + 1) + " of " +
                             std::to_string(n) + ": " + e.what());
  }
}

CheckAhead::~CheckAhead() { stop_threads(); }

void CheckAhead::stop_threads() {
  Shared& s = *shared_;
  s.stop = true;
  std::vector<Shared::Slot> at_end;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.ended.wait_for(lock, std::chrono::duration<double>(s.options.stop_wait_s), [&] { return s.running == 0; });
    at_end = s.slots;
  }
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < threads_.size(); ++i) {
    const Shared::Slot& slot = at_end[i];
    if (slot.ended) {
      threads_[i].join();
      continue;
    }
    char busy[32];
    std::snprintf(busy, sizeof busy, "%.1f", std::chrono::duration<double>(now - slot.since).count());
    log::warn("file check thread " + std::to_string(i) + " is still checking " +
              (slot.sample >= 0 ? s.dataset->folder().samples[slot.sample].path : std::string("a file")) + " after " +
              busy + " s; left running (detached) so that shutdown does not hang");
    threads_[i].detach();
    ++detached_thread_count();
  }
  threads_.clear();
}

void CheckAhead::loader_at(int64_t epoch, int64_t position) {
  const int64_t p = CheckWalk::point(epoch, position);
  std::atomic<int64_t>& loader = shared_->loader;
  int64_t seen = loader.load(std::memory_order_relaxed);
  while (p > seen && !loader.compare_exchange_weak(seen, p, std::memory_order_relaxed)) {
  }
}

void CheckAhead::wait() const {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.ended.wait(lock, [&] { return s.running == 0; });
}

std::exception_ptr CheckAhead::error() const {
  return shared_->failed.load(std::memory_order_acquire) ? shared_->error : nullptr;
}

std::optional<int64_t> CheckAhead::Shared::claim(int id) {
  std::lock_guard<std::mutex> lock(mutex);
  if (stop) return std::nullopt;
  std::optional<int64_t> index = walk.next(loader.load(std::memory_order_relaxed));
  if (index) {
    slots[static_cast<size_t>(id)].sample = *index;
    slots[static_cast<size_t>(id)].since = std::chrono::steady_clock::now();
  }
  return index;
}

void CheckAhead::Shared::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mutex);
  stop = true;  // the walk may be left half-updated: no thread takes another sample from it
  if (failed) return;
  error = e;
  failed.store(true, std::memory_order_release);
  log::warn("checking the GPU's files ahead of the loader stopped: " + message_of(e) +
            "; the workers check the files left themselves");
}

void CheckAhead::run(const std::shared_ptr<Shared>& shared, int id) {
  Shared& s = *shared;
  if (s.options.idle_priority) lower_to_idle_priority();
  try {
    DecodeScratch scratch;
    while (!s.stop) {
      const std::optional<int64_t> index = s.claim(id);
      if (!index) break;
      if (s.options.before_check) s.options.before_check(*index);
      s.dataset->check_gpu_file(*index, scratch);  // a bad file is not an exception here: load() meets it
    }
  } catch (...) {
    s.fail(std::current_exception());
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.slots[static_cast<size_t>(id)].ended = true;
  if (--s.running == 0) s.ended.notify_all();
}

}  // namespace pinfeed::data

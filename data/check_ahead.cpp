#include "data/check_ahead.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/log.h"

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

CheckAhead::CheckAhead(const Dataset& dataset, CheckWalk::Order order, CheckAheadOptions options)
    : dataset_(dataset), options_(options), walk_(dataset.size(), std::move(order), options.lead) {
  threads_.reserve(static_cast<size_t>(std::max(0, options_.threads)));
  try {
    for (int i = 0; i < options_.threads; ++i) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++running_;
      }
      threads_.emplace_back([this] { run(); });
    }
  } catch (const std::exception& e) {  // std::system_error when the system refuses a thread
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --running_;  // the one that did not start
    }
    const size_t started = threads_.size();
    stop_ = true;
    for (auto& t : threads_) t.join();
    throw std::runtime_error("cannot start file check thread " + std::to_string(started + 1) + " of " +
                             std::to_string(options_.threads) + ": " + e.what());
  }
}

CheckAhead::~CheckAhead() {
  stop_ = true;
  for (auto& t : threads_) t.join();
}

void CheckAhead::loader_at(int64_t epoch, int64_t position) {
  const int64_t p = CheckWalk::point(epoch, position);
  int64_t seen = loader_.load(std::memory_order_relaxed);
  while (p > seen && !loader_.compare_exchange_weak(seen, p, std::memory_order_relaxed)) {
  }
}

void CheckAhead::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  ended_.wait(lock, [&] { return running_ == 0; });
}

std::exception_ptr CheckAhead::error() const {
  return failed_.load(std::memory_order_acquire) ? error_ : nullptr;
}

std::optional<int64_t> CheckAhead::claim() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stop_) return std::nullopt;
  return walk_.next(loader_.load(std::memory_order_relaxed));
}

void CheckAhead::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = true;  // the walk may be left half-updated: no thread takes another sample from it
  if (failed_) return;
  error_ = error;
  failed_.store(true, std::memory_order_release);
  log::warn("checking the GPU's files ahead of the loader stopped: " + message_of(error) +
            "; the workers check the files left themselves");
}

void CheckAhead::run() {
  if (options_.idle_priority) lower_to_idle_priority();
  try {
    DecodeScratch scratch;
    while (!stop_) {
      const std::optional<int64_t> index = claim();
      if (!index) break;
      dataset_.check_gpu_file(*index, scratch);  // a bad file is not an exception here: load() meets it
    }
  } catch (...) {
    fail(std::current_exception());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (--running_ == 0) ended_.notify_all();
}

}  // namespace pinfeed::data

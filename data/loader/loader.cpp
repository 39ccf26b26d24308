#include "data/loader/loader.h"

#include <opencv2/core/utility.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "common/log.h"
#include "data/error.h"
#include "data/loader/loader_shared.h"
#include "data/loader/shard.h"
#include "data/transform/sample_rng.h"

namespace pinfeed::data {

using loader_detail::number_text;
using loader_detail::seconds_text;
using loader_detail::stop_wait_s;

// Three cores are left to the training thread (it launches the GPU's kernels: an eager step is bound by it),
// the dual_stream copier and the driver: two workers fewer kept an eager step at the GPU's rate, the rest still
// decoding well ahead of it (docs/transfer-modes.md#current-table).
int default_workers(int processes) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, processes);
  if (cores > 4) return cores - 3;
  return cores > 1 ? cores - 1 : 1;
}

namespace {

std::vector<int64_t> order_of(const LoaderOptions& o, int64_t samples, int64_t epoch) {
  std::vector<int64_t> order(samples);
  std::iota(order.begin(), order.end(), int64_t{0});
  if (o.shuffle) {  // Fisher-Yates with our own generator: the same order on every platform
    SampleRng rng(stream_seed(o.seed, static_cast<uint64_t>(epoch), 0, 0x5EED));
    for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  }
  if (o.shards > 1) order = shard_of(order, o.batch_size, o.shard_rank, o.shards, o.drop_last);
  return order;
}

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, BatchArena* arena) : arena_(arena) {
  if (options.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1");
  if (options.prefetch_batches < 1) throw std::invalid_argument("prefetch_batches must be >= 1");
  if (options.sample_timeout_s < 0) throw std::invalid_argument("sample_timeout_s must be >= 0");
  if (dataset->size() == 0) throw DataError("dataset " + dataset->folder().root + " is empty");
  if (options.shards < 1 || options.shard_rank < 0 || options.shard_rank >= options.shards) {
    throw std::invalid_argument("shard_rank must be in [0, shards)");
  }
  shared_ = std::make_shared<Shared>(std::move(dataset), std::move(options));
  const Dataset& ds = *shared_->dataset;
  const LoaderOptions& o = shared_->options;
  if (batches_per_epoch() == 0 && (o.drop_last || o.shards == 1)) {
    throw DataError("dataset " + ds.folder().root + " has " + std::to_string(ds.size()) +
                    " samples, fewer than one batch of " + std::to_string(o.batch_size) +
                    (o.shards > 1 ? " on each of " + std::to_string(o.shards) + " ranks" : ""));
  }
  // One sample per worker thread at a time: OpenCV's own thread pool inside resize/decode would only
  // oversubscribe the cores the workers already fill.
  cv::setNumThreads(1);
  const int n = worker_count(o);
  if (ds.transform().gpu_decode) start_check_ahead(n);
  shared_->check_ahead = check_ahead_.get();
  shared_->slots.resize(static_cast<size_t>(n));
  threads_.reserve(n);
  try {
    for (int i = 0; i < n; ++i) threads_.emplace_back([s = shared_, i] { worker_loop(s, i); });
  } catch (const std::exception& e) {  // std::system_error when the system refuses a thread
    // The destructor does not run for a constructor that throws, and a joinable std::thread destroyed would
    // call std::terminate: the threads already started are stopped and joined here.
    const int started = static_cast<int>(threads_.size());
    stop_workers();
    check_ahead_.reset();
    throw std::runtime_error("cannot start decode thread " + std::to_string(started + 1) + " of " + std::to_string(n) +
                             ": " + e.what() + "; use fewer workers");
  }
}

Loader::~Loader() {
  stop_workers();  // first: the workers report their positions to check_ahead_
  check_ahead_.reset();
}

const Dataset& Loader::dataset() const { return *shared_->dataset; }
const LoaderOptions& Loader::options() const { return shared_->options; }

void Loader::start_check_ahead(int workers) {
  const LoaderOptions& options = shared_->options;
  int threads = options.check_threads;
  if (threads < 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency()) / options.shards;
    threads = std::max(1, cores - workers - 2);
  }
  if (threads == 0) return;
  try {
    CheckAheadOptions o;
    o.threads = threads;
    // An eighth of the batches in flight: where the workers outrun the checking threads, the stretch left to them
    // is short enough for the queued batches to absorb (the whole window made a paced first epoch wait on them),
    // and each overtaking checks only the few files in hand twice (benchmarks/bench_data.cpp, BM_LoaderEpochGpuFiles).
    o.lead = std::max<int64_t>(1, static_cast<int64_t>(options.prefetch_batches) * options.batch_size / 8);
    o.stop_wait_s = stop_wait_s(options);
    // A copy without the callbacks: a checking thread left running must not keep the caller's alive.
    LoaderOptions order_options = options;
    order_options.stop_requested = nullptr;
    order_options.before_load = nullptr;
    const int64_t samples = shared_->dataset->size();
    auto order = [order_options, samples](int64_t epoch) { return order_of(order_options, samples, epoch); };
    check_ahead_ = std::make_unique<CheckAhead>(shared_->dataset, std::move(order), o);
  } catch (const std::exception& e) {
    // Only the first epoch's speed depends on it.
    log::warn(std::string(e.what()) + "; the workers check each file for the GPU themselves");
  }
}

int64_t Loader::batches_per_epoch() const {
  const LoaderOptions& o = shared_->options;
  const int64_t n = samples_per_epoch(), b = o.batch_size;
  return o.drop_last ? n / b : (n + b - 1) / b;
}

int64_t Loader::samples_per_epoch() const {
  const LoaderOptions& o = shared_->options;
  const int64_t n = shared_->dataset->size(), b = o.batch_size, global = b * o.shards;
  const int64_t whole = n / global * b;  // from the whole global batches (data/loader/shard.h)
  if (o.drop_last) return whole;
  return whole + std::clamp<int64_t>(n % global - o.shard_rank * b, 0, b);
}

std::vector<int64_t> Loader::epoch_order(int64_t epoch) const {
  return order_of(shared_->options, shared_->dataset->size(), epoch);
}

template <class Ready>
void Loader::wait_locked(std::unique_lock<std::mutex>& lock, Ready ready) {
  Shared& s = *shared_;
  const LoaderOptions& o = s.options;
  while (!s.done_cv.wait_for(lock, kStopPoll, ready)) {
    if (o.stop_requested && o.stop_requested()) throw Interrupted();
    if (o.sample_timeout_s <= 0) continue;
    const Shared::WorkerSlot* longest = nullptr;  // the worker longest on its sample
    for (const auto& w : s.slots) {
      if (w.sample >= 0 && (!longest || w.since < longest->since)) longest = &w;
    }
    if (!longest) continue;
    const double busy = std::chrono::duration<double>(std::chrono::steady_clock::now() - longest->since).count();
    if (busy > o.sample_timeout_s) {
      throw StuckSample("no progress for " + seconds_text(busy) + " s: a worker is still loading " +
                        s.dataset->folder().samples[longest->sample].path + " (data.sample_timeout_s = " +
                        number_text(o.sample_timeout_s) + ")");
    }
  }
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mutex);
  const bool consumed = next_to_open_ >= end_batch_ && (s.window.empty() || s.window.front()->epoch != epoch_);
  const bool keep_next = !next_order_.empty() && epoch == epoch_ + 1 && first_batch == 0 && consumed;
  if (keep_next) {
    // The next epoch from its start, as fill_window_locked began it: keep what is decoded or decoding.
    epoch_ = epoch;
    order_ = std::move(next_order_);
    next_to_open_ = next_opened_;
  } else {
    abandon_locked(lock);
    epoch_ = epoch;
    order_ = epoch_order(epoch);
    next_to_open_ = std::clamp<int64_t>(first_batch, 0, batches_per_epoch());
  }
  next_order_.clear();
  next_opened_ = 0;
  end_batch_ = batches_per_epoch();
  // Kept batches were opened from the epoch's start; their workers report their own positions.
  if (check_ahead_) check_ahead_->loader_at(epoch_, keep_next ? 0 : next_to_open_ * s.options.batch_size);
  fill_window_locked();
}

void Loader::abandon_locked(std::unique_lock<std::mutex>& lock) {
  Shared& s = *shared_;
  std::deque<Task> dropped;
  dropped.swap(s.tasks);
  try {
    wait_locked(lock, [&] { return s.active == 0; });
  } catch (...) {
    // Left as it was: the batches in flight get their samples still, so next() works (or throws) as before.
    s.tasks.swap(dropped);
    s.work_cv.notify_all();
    throw;
  }
  for (auto& p : s.window) arena_->release(p->batch.slot, nullptr);
  s.window.clear();
}

void Loader::open_batch_locked(int slot, int64_t epoch, int64_t index, const std::vector<int64_t>& order) {
  Shared& s = *shared_;
  auto p = std::make_unique<Pending>();
  const int64_t begin = index * s.options.batch_size;
  const int64_t end = std::min<int64_t>(begin + s.options.batch_size, static_cast<int64_t>(order.size()));
  p->epoch = epoch;
  p->batch.epoch = epoch;
  p->batch.index = index;
  p->batch.size = end - begin;
  p->batch.side = s.dataset->side(epoch);
  p->batch.slot = slot;
  p->batch.memory = arena_->memory(slot);
  p->remaining = static_cast<int>(end - begin);
  for (int64_t i = begin; i < end; ++i) s.tasks.push_back({p.get(), i - begin, order[i]});
  s.window.push_back(std::move(p));
}

void Loader::fill_window_locked() {
  Shared& s = *shared_;
  bool opened = false;
  while (static_cast<int>(s.window.size()) < s.options.prefetch_batches) {
    const bool current = next_to_open_ < end_batch_;
    if (!current && (!s.options.continue_into_next_epoch || next_opened_ >= end_batch_)) break;
    auto slot = arena_->try_acquire();
    if (!slot) break;
    if (current) {
      open_batch_locked(*slot, epoch_, next_to_open_++, order_);
    } else {
      if (next_order_.empty()) next_order_ = epoch_order(epoch_ + 1);
      open_batch_locked(*slot, epoch_ + 1, next_opened_++, next_order_);
    }
    opened = true;
  }
  if (opened) s.work_cv.notify_all();
}

std::optional<Batch> Loader::next() {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mutex);
  fill_window_locked();
  if (!s.window.empty() && s.window.front()->epoch != epoch_) return std::nullopt;  // only the next epoch's left
  if (s.window.empty()) {
    if (next_to_open_ >= end_batch_) return std::nullopt;
    // Every slot is still being read (or copied) by the consumer: wait for the oldest to free up.
    lock.unlock();
    auto slot = arena_->acquire();
    lock.lock();
    if (!slot) throw std::logic_error("loader: every arena slot is held by the consumer; recycle batches");
    open_batch_locked(*slot, epoch_, next_to_open_++, order_);
    s.work_cv.notify_all();
  }
  Pending* front = s.window.front().get();
  wait_locked(lock, [&] { return front->remaining == 0; });
  std::unique_ptr<Pending> done = std::move(s.window.front());
  s.window.pop_front();
  fill_window_locked();  // keep the workers busy while the consumer computes
  if (done->error) {
    arena_->release(done->batch.slot, nullptr);
    std::rethrow_exception(done->error);
  }
  return done->batch;
}

void Loader::recycle(const Batch& batch, std::shared_ptr<Fence> fence) { arena_->release(batch.slot, std::move(fence)); }

Loader::Queue Loader::queue() const {
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mutex);
  Queue q;
  for (const auto& pending : s.window) {
    if (pending->remaining == 0) ++q.decoded;
    else ++q.loading;
  }
  return q;
}

}  // namespace pinfeed::data

#include "data/loader.h"

#include <opencv2/core/utility.hpp>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "common/log.h"
#include "data/error.h"
#include "data/sample_rng.h"
#include "data/shard.h"

namespace pinfeed::data {

// Three cores are left to the training thread (it launches the GPU's kernels: an eager step is bound by it),
// the dual_stream copier and the driver. On the H200 host (16 cores) 13 workers instead of 15 kept an eager
// bf16 step at the GPU's rate (dual_stream 2807 against 2496 images/s, median of the GPU-resident ceiling 2606)
// while still decoding 6,300 images/s, 1.3x the fastest step measured then (docs/transfer-modes.md).
int default_workers(int processes) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, processes);
  if (cores > 4) return cores - 3;
  return cores > 1 ? cores - 1 : 1;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, BatchArena* arena)
    : dataset_(std::move(dataset)), options_(options), arena_(arena) {
  if (options_.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1");
  if (options_.prefetch_batches < 1) throw std::invalid_argument("prefetch_batches must be >= 1");
  if (dataset_->size() == 0) throw DataError("dataset " + dataset_->folder().root + " is empty");
  if (options_.shards < 1 || options_.shard_rank < 0 || options_.shard_rank >= options_.shards) {
    throw std::invalid_argument("shard_rank must be in [0, shards)");
  }
  if (batches_per_epoch() == 0 && (options_.drop_last || options_.shards == 1)) {
    throw DataError("dataset " + dataset_->folder().root + " has " + std::to_string(dataset_->size()) +
                    " samples, fewer than one batch of " + std::to_string(options_.batch_size) +
                    (options_.shards > 1 ? " on each of " + std::to_string(options_.shards) + " ranks" : ""));
  }
  // One sample per worker thread at a time: OpenCV's own thread pool inside resize/decode would only
  // oversubscribe the cores the workers already fill.
  cv::setNumThreads(1);
  const int n = options_.workers > 0 ? options_.workers : default_workers();
  if (dataset_->transform().gpu_decode) start_check_ahead(n);
  threads_.reserve(n);
  try {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { worker_loop(); });
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

void Loader::start_check_ahead(int workers) {
  int threads = options_.check_threads;
  if (threads < 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency()) / options_.shards;
    threads = std::max(1, cores - workers - 2);
  }
  if (threads == 0) return;
  try {
    CheckAheadOptions o;
    o.threads = threads;
    // An eighth of the batches in flight: where the workers outrun the checking threads, the stretch left to them
    // is short enough for the batches queued to absorb (a longer one made a paced first epoch wait on them), and
    // each time they overtake costs the few files being checked at that moment twice. On 2 cores, 1 worker and
    // 1 checking thread, a consumer taking 64 samples every 40 ms: a lead of the whole window (256) gave 1,320
    // samples/s, 32 gave 1,490, the later epochs 1,550 (tests/bench_data.cpp, BM_LoaderEpochGpuFiles).
    o.lead = std::max<int64_t>(1, static_cast<int64_t>(options_.prefetch_batches) * options_.batch_size / 8);
    check_ahead_ = std::make_unique<CheckAhead>(*dataset_, [this](int64_t epoch) { return epoch_order(epoch); }, o);
  } catch (const std::exception& e) {
    // Only the first epoch's speed depends on it.
    log::warn(std::string(e.what()) + "; the workers check each file for the GPU themselves");
  }
}

void Loader::stop_workers() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    tasks_.clear();
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

int64_t Loader::batches_per_epoch() const {
  const int64_t n = samples_per_epoch(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t Loader::samples_per_epoch() const {
  const int64_t n = dataset_->size(), b = options_.batch_size, global = b * options_.shards;
  const int64_t whole = n / global * b;  // from the whole global batches (data/shard.h)
  if (options_.drop_last) return whole;
  return whole + std::clamp<int64_t>(n % global - options_.shard_rank * b, 0, b);
}

std::vector<int64_t> Loader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(dataset_->size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {  // Fisher-Yates with our own generator: the same order on every platform
    SampleRng rng(stream_seed(options_.seed, static_cast<uint64_t>(epoch), 0, 0x5EED));
    for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  }
  if (options_.shards > 1) order = shard_of(order, options_.batch_size, options_.shard_rank, options_.shards, options_.drop_last);
  return order;
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool consumed = next_to_open_ >= end_batch_ && (window_.empty() || window_.front()->epoch != epoch_);
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
  if (check_ahead_) check_ahead_->loader_at(epoch_, keep_next ? 0 : next_to_open_ * options_.batch_size);
  fill_window_locked();
}

void Loader::abandon_locked(std::unique_lock<std::mutex>& lock) {
  tasks_.clear();
  done_cv_.wait(lock, [&] { return active_ == 0; });
  for (auto& p : window_) arena_->release(p->batch.slot, nullptr);
  window_.clear();
}

void Loader::open_batch_locked(int slot, int64_t epoch, int64_t index, const std::vector<int64_t>& order) {
  auto p = std::make_unique<Pending>();
  const int64_t begin = index * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(order.size()));
  p->epoch = epoch;
  p->batch.index = index;
  p->batch.size = end - begin;
  p->batch.slot = slot;
  p->batch.memory = arena_->memory(slot);
  p->remaining = static_cast<int>(end - begin);
  for (int64_t i = begin; i < end; ++i) tasks_.push_back({p.get(), i - begin, order[i]});
  window_.push_back(std::move(p));
}

void Loader::fill_window_locked() {
  bool opened = false;
  while (static_cast<int>(window_.size()) < options_.prefetch_batches) {
    const bool current = next_to_open_ < end_batch_;
    if (!current && (!options_.prefetch_next_epoch || next_opened_ >= end_batch_)) break;
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
  if (opened) work_cv_.notify_all();
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  fill_window_locked();
  if (!window_.empty() && window_.front()->epoch != epoch_) return std::nullopt;  // only the next epoch's left
  if (window_.empty()) {
    if (next_to_open_ >= end_batch_) return std::nullopt;
    // Every slot is still being read (or copied) by the consumer: wait for the oldest to free up.
    lock.unlock();
    auto slot = arena_->acquire();
    lock.lock();
    if (!slot) throw std::logic_error("loader: every arena slot is held by the consumer; recycle batches");
    open_batch_locked(*slot, epoch_, next_to_open_++, order_);
    work_cv_.notify_all();
  }
  Pending* front = window_.front().get();
  done_cv_.wait(lock, [&] { return front->remaining == 0; });
  std::unique_ptr<Pending> done = std::move(window_.front());
  window_.pop_front();
  fill_window_locked();  // keep the workers busy while the consumer computes
  if (done->error) {
    arena_->release(done->batch.slot, nullptr);
    std::rethrow_exception(done->error);
  }
  return done->batch;
}

void Loader::recycle(const Batch& batch, std::shared_ptr<Fence> fence) { arena_->release(batch.slot, std::move(fence)); }

void Loader::worker_loop() {
  // Below the training thread: it launches the GPU's work, and a worker that preempts it idles the GPU.
  if (options_.worker_nice > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), options_.worker_nice);
  DecodeScratch scratch;
  const size_t image_bytes = dataset_->image_bytes();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (stop_) return;
    Task task = tasks_.front();
    tasks_.pop_front();
    ++active_;
    const int64_t epoch = task.pending->epoch;
    if (check_ahead_) {
      check_ahead_->loader_at(epoch, task.pending->batch.index * options_.batch_size + task.position + 1);
    }
    lock.unlock();

    int bad = 0;
    std::exception_ptr error;
    Batch& b = task.pending->batch;
    try {
      auto* dst = static_cast<uint8_t*>(b.memory.images) + task.position * image_bytes;
      data::EncodedImage* encoded = b.memory.encoded ? b.memory.encoded + task.position : nullptr;
      bad = dataset_->load(task.sample, options_.seed, epoch, dst, b.memory.labels + task.position, scratch, encoded);
    } catch (const DataError&) {
      error = std::current_exception();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(
          DataError("worker failed on " + dataset_->folder().samples[task.sample].path + ": " + e.what()));
    } catch (...) {
      error = std::make_exception_ptr(
          DataError("worker failed on " + dataset_->folder().samples[task.sample].path + ": unknown error"));
    }

    lock.lock();
    --active_;
    task.pending->batch.bad_images += bad;
    if (error && !task.pending->error) task.pending->error = error;
    if (--task.pending->remaining == 0 || active_ == 0) done_cv_.notify_all();
  }
}

}  // namespace pinfeed::data

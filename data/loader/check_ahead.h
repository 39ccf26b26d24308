// With GPU decode, every file the GPU takes is checked by libjpeg on the CPU before the GPU sees it
// (Dataset::load). Threads that run that check ahead of the loader's workers, in the order the workers will load
// the files, on cores nothing else wants, so that in the first epoch too the workers mostly just read files, as in
// the later ones, instead of paying a check on top of every read. The workers still check any file not checked
// yet, so correctness never depends on these threads; they only move the work.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset/dataset.h"

namespace pinfeed::data {

// The order CheckAhead checks samples in: the loader's own, from the point the loader has reached, then the
// following epochs' orders for the samples not given out yet. Each sample is given out at most once. Not
// thread-safe (CheckAhead guards it).
class CheckWalk {
 public:
  using Order = std::function<std::vector<int64_t>(int64_t epoch)>;  // the sample indices of an epoch, in order

  // `lead`: how far past the workers a walk they overtook within an epoch goes on (below).
  CheckWalk(int64_t samples, Order order, int64_t lead = 0);

  // A point of the loader's walk: `position` within `epoch`'s order; later points compare greater.
  static int64_t point(int64_t epoch, int64_t position) { return epoch << 32 | position; }

  // The next sample to check, or nullopt once there is none left: every sample given out, or a whole epoch
  // with nothing new in an order the same as the one before (a rank whose share is the same every epoch never
  // sees the others), or many whole epochs in a row with nothing new.
  // `loader` is the loader's point: its workers have taken every sample before it, and check those themselves.
  // When it lies ahead, the walk jumps there, in another epoch (the loader started one there) or before the walk
  // gave out anything from where it began. Once the walk has given out samples, the workers reaching its point
  // have overtaken it, being faster: resuming just ahead of them, it would check the very files they take next
  // (both paying for each, in step), so it goes on `lead` samples further and leaves them that stretch. A point
  // behind the walk (an epoch restarted) is passed already.
  std::optional<int64_t> next(int64_t loader);

 private:
  void begin(int64_t epoch, int64_t position);

  int64_t samples_;
  Order order_of_;
  int64_t lead_;
  std::vector<int64_t> order_;  // epoch_'s
  int64_t epoch_ = 0, position_ = 0;
  bool begun_ = false;
  bool whole_ = false;  // this epoch's walk began at its first position
  bool fresh_ = false;  // gave out a sample since the last begin()
  bool repeated_ = false;  // epoch_'s order is the one walked before it
  int barren_epochs_ = 0;  // whole epochs in a row with nothing new
  std::vector<uint8_t> given_;  // per sample
  int64_t given_count_ = 0;
  bool done_ = false;
};

struct CheckAheadOptions {
  int threads = 1;
  int64_t lead = 0;  // CheckWalk's
  // Linux SCHED_IDLE (else nice 19): the threads run only on cores no other thread wants, and a thread that
  // wakes preempts them at once, so neither the training thread (which launches the GPU's work) nor a worker
  // waits for them. Off only in tests, which must not depend on idle cores.
  bool idle_priority = true;
  // How long the destructor waits for a thread to finish the file in hand. One still checking then (a read that
  // never returns, libjpeg looping) is left running, detached (data/loader/detached.h), so that shutdown cannot hang.
  double stop_wait_s = 5;
  // Test seam: called on a checking thread with each sample's index just before checking it, so that a test can
  // block one as a stuck read would. Empty outside tests.
  std::function<void(int64_t sample)> before_check;
};

class CheckAhead {
 public:
  // Starts options.threads threads calling dataset->check_gpu_file over CheckWalk(dataset->size(), order), from
  // the start of epoch 0 until loader_at says otherwise. `order` is called on those threads. Throws
  // std::runtime_error (threads already started are stopped) when the system refuses a thread.
  CheckAhead(std::shared_ptr<const Dataset> dataset, CheckWalk::Order order, CheckAheadOptions options);
  // Stops the threads: each finishes the file it is checking (milliseconds), never the walk. One that has not
  // within options.stop_wait_s is detached, with a warning naming its file; it holds (shared) everything it can
  // still touch: the dataset, the walk and the order, its own buffers.
  ~CheckAhead();
  CheckAhead(const CheckAhead&) = delete;
  CheckAhead& operator=(const CheckAhead&) = delete;

  // The loader's workers have taken every sample before `position` of `epoch`'s order (a worker took the one
  // before, or the loader starts the epoch there). Lock-free: the loader's own threads call it, and must never
  // wait for a thread of idle priority.
  void loader_at(int64_t epoch, int64_t position);

  int threads() const { return static_cast<int>(threads_.size()); }
  // Blocks until every thread has ended: nothing left to check, or stopped by an error or the destructor.
  void wait() const;
  // What stopped the threads before the walk's end (logged as a warning when it happened), else null. A bad
  // file is not an error: check_gpu_file leaves it to load().
  std::exception_ptr error() const;

 private:
  struct Shared;  // what the threads use, owned jointly with them (check_ahead.cpp)

  static void run(const std::shared_ptr<Shared>& shared, int id);
  void stop_threads();  // joins every thread started, or detaches a stuck one (~CheckAhead)

  std::shared_ptr<Shared> shared_;
  std::vector<std::thread> threads_;
};

}  // namespace pinfeed::data

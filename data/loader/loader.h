// A pool of worker threads that decode and augment samples straight into batch slots of a BatchArena,
// keeps a bounded number of batches in flight, and hands them out in order. The pool lives across epochs.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/loader/batch_arena.h"
#include "data/loader/check_ahead.h"
#include "data/dataset/dataset.h"

namespace pinfeed::data {

struct LoaderOptions {
  int64_t batch_size = 256;
  int workers = 0;           // 0: default_workers(host_ranks); worker_count() says which
  int host_ranks = 1;        // processes sharing this host's cores (LOCAL_WORLD_SIZE)
  int prefetch_batches = 4;  // batches decoded ahead of the consumer
  bool shuffle = true;       // reshuffled every epoch from (seed, epoch)
  bool drop_last = true;     // drop a final partial batch
  uint64_t seed = 0;
  int worker_nice = 5;  // Linux nice of worker threads, so the training thread wins a contended core
  int shard_rank = 0, shards = 1;  // data-parallel: this rank's share of each epoch (data/loader/shard.h)
  // Once every batch of the epoch is under way, start on the next epoch's first batches, so that the epoch
  // after this one (started with start_epoch(epoch + 1)) does not begin with the whole pipeline empty. Off for
  // a validation split, which always re-reads epoch 0.
  bool continue_into_next_epoch = true;
  // With GPU decode (TransformOptions::gpu_decode): threads that check the files with libjpeg ahead of the
  // workers, in this loader's order, at idle priority (data/loader/check_ahead.h). -1: the cores the workers leave,
  // hardware threads / shards - workers - 2 for the training thread and the copier, at least 1 (the loader
  // cannot tell how many ranks share this host: it assumes all of them do). 0: none, each worker checks a file
  // the first time it loads it.
  int check_threads = -1;
  // A worker busy on one sample for longer than this (a read that never returns from a network file system, a
  // decoder looping inside its library) makes next() and start_epoch() throw StuckSample (data/error.h) naming
  // the file, instead of the run waiting for ever on it. 0: no bound. It also bounds how long shutdown waits for
  // a worker (kStopWait at most): one that is well finishes its sample within it.
  double sample_timeout_s = 300;
  // Asked every kStopPoll while next() or start_epoch() waits for the workers: true makes the wait throw
  // Interrupted, so that a stop asked for (Ctrl-C) ends a wait on a stuck or slow worker too. A batch that is
  // ready is returned without asking. Empty: never. Called on the threads that call next() and start_epoch(),
  // with the loader's lock held: it must be cheap (an atomic load) and must not call into the loader.
  std::function<bool()> stop_requested;
  // Test seam: called on a worker with each sample's dataset index just before loading it, so that a test can
  // block one sample as a stuck read would. Empty outside tests.
  std::function<void(int64_t sample)> before_load;
};

// How often a wait for the workers looks at stop_requested and at the workers' progress. Short enough for a stop to
// feel prompt; a batch that is ready wakes its waiter at once, whatever this is.
inline constexpr std::chrono::milliseconds kStopPoll{100};
// The longest the Loader's destructor waits for a worker to finish the sample in hand before leaving it running
// (detached, data/loader/detached.h): one that has not returned by then is taken for stuck.
inline constexpr double kStopWait = 5.0;

// Decode threads for one of `processes` ranks sharing this host's cores.
int default_workers(int processes = 1);
// The decode threads a loader of these options runs.
inline int worker_count(const LoaderOptions& o) { return o.workers > 0 ? o.workers : default_workers(o.host_ranks); }

struct Batch {
  int64_t epoch = 0;   // whose samples and draws (a batch opened early is the next epoch's)
  int64_t index = -1;  // position within the epoch
  int64_t size = 0;    // samples in it (<= batch_size for a final partial batch)
  int side = 0;        // its images' side (the epoch's: Dataset::side), back to back at that stride
  int slot = -1;       // arena slot holding it
  BatchMemory memory;
  // Bad loads while filling this batch: each replaced sample, plus each replacement that was bad too. The same
  // bad file counts again every epoch; Dataset::distinct_bad_images() counts files.
  int bad_images = 0;
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, BatchArena* arena);
  // Stops the workers: waits for each to finish the sample in hand, up to kStopWait (sample_timeout_s if
  // shorter), and leaves one still loading then running, detached, with a warning naming its file; it will never
  // write into the arena (see Shared in loader_shared.h). The arena need only outlive this call.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const;  // this rank's
  int64_t samples_per_epoch() const;  // this rank's
  int workers() const { return static_cast<int>(threads_.size()); }
  // The threads checking the GPU's files ahead of the workers (options().check_threads), or null: none asked
  // for, no GPU decode, or the system refused a thread (logged).
  const CheckAhead* check_ahead() const { return check_ahead_.get(); }
  const Dataset& dataset() const;
  const LoaderOptions& options() const;

  // Starts (or restarts) an epoch at batch `first_batch`; abandons batches still in flight, except the next
  // epoch's first batches when this is that epoch from its start. Abandoning waits for the workers' samples in
  // hand: it throws as next() does when one is stuck or a stop is requested.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch in order, waiting for it if needed; nullopt once the epoch is done. Rethrows a worker's
  // exception (it names the sample's path). While it waits, throws Interrupted once stop_requested() is true,
  // and StuckSample once a worker has been on one sample for longer than sample_timeout_s.
  std::optional<Batch> next();
  // Gives a batch's slot back; it is reused once `fence` (if any) says its last reader finished.
  void recycle(const Batch& batch, std::shared_ptr<Fence> fence = nullptr);
  // The batches opened ahead of the consumer: decoded (every sample loaded, waiting to be taken) and loading.
  struct Queue {
    int decoded = 0;
    int loading = 0;
  };
  Queue queue() const;

 private:
  struct Pending {
    int64_t epoch = 0;  // whose random draws; the batch after the current epoch's last is the next epoch's
    Batch batch;
    int remaining = 0;
    std::exception_ptr error;
  };
  struct Task {
    Pending* pending;
    int64_t position;  // within the batch
    int64_t sample;    // dataset index
  };
  struct Shared;  // what the workers use, owned jointly with them (loader_shared.h)

  static void worker_loop(const std::shared_ptr<Shared>& shared, int id);
  void start_check_ahead(int workers);
  void stop_workers();  // joins every worker thread started, or detaches a stuck one
  std::vector<int64_t> epoch_order(int64_t epoch) const;  // this rank's sample order of an epoch
  void open_batch_locked(int slot, int64_t epoch, int64_t index, const std::vector<int64_t>& order);
  void fill_window_locked();
  void abandon_locked(std::unique_lock<std::mutex>& lock);
  // Waits on done_cv until ready(), in slices of kStopPoll: throws Interrupted or StuckSample (above).
  template <class Ready>
  void wait_locked(std::unique_lock<std::mutex>& lock, Ready ready);

  std::shared_ptr<Shared> shared_;  // its mutex guards the fields below too
  BatchArena* arena_;
  std::vector<int64_t> order_;        // this epoch's sample order
  int64_t epoch_ = 0;
  std::vector<int64_t> next_order_;   // epoch_ + 1's, once its first batches are opened early
  int64_t next_opened_ = 0;           // batches of epoch_ + 1 opened early (all at the window's back)
  int64_t next_to_open_ = 0;          // batch index
  int64_t end_batch_ = 0;
  std::vector<std::thread> threads_;
  // Destroyed after the workers stopped: they report their positions to it.
  std::unique_ptr<CheckAhead> check_ahead_;
};

}  // namespace pinfeed::data

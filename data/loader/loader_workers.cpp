// The Loader's worker threads: the loop each runs, and how they are stopped (or left running) at shutdown.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "common/log.h"
#include "data/error.h"
#include "data/loader/detached.h"
#include "data/loader/loader.h"
#include "data/loader/loader_shared.h"

namespace pinfeed::data {

using loader_detail::seconds_text;
using loader_detail::stop_wait_s;

void Loader::stop_workers() {
  Shared& s = *shared_;
  const size_t started = threads_.size();
  std::vector<Shared::WorkerSlot> at_end;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.tasks.clear();
    s.stop = true;
    s.check_ahead = nullptr;
    s.work_cv.notify_all();
    const auto exited = [&] {
      return std::all_of(s.slots.begin(), s.slots.begin() + started, [](const auto& w) { return w.exited; });
    };
    s.done_cv.wait_for(lock, std::chrono::duration<double>(stop_wait_s(s.options)), exited);
    // Never left behind while writing into a batch slot (see Shared): that ends in microseconds.
    s.done_cv.wait(lock, [&] {
      return std::none_of(s.slots.begin(), s.slots.begin() + started, [](const auto& w) { return w.writing; });
    });
    at_end.assign(s.slots.begin(), s.slots.begin() + started);
  }
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < started; ++i) {
    const Shared::WorkerSlot& w = at_end[i];
    if (w.exited) {
      threads_[i].join();
      continue;
    }
    const double busy = std::chrono::duration<double>(now - w.since).count();
    log::warn("decode worker " + std::to_string(i) + " is still loading " +
              (w.sample >= 0 ? s.dataset->folder().samples[w.sample].path : std::string("a sample")) + " after " +
              seconds_text(busy) + " s; left running (detached) so that shutdown does not hang");
    threads_[i].detach();
    ++detached_thread_count();
  }
  threads_.clear();
}

void Loader::worker_loop(const std::shared_ptr<Shared>& shared, int id) {
  Shared& s = *shared;
  const LoaderOptions& o = s.options;
  const Dataset& dataset = *s.dataset;
  // Below the training thread: it launches the GPU's work, and a worker that preempts it idles the GPU.
  if (o.worker_nice > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), o.worker_nice);
  DecodeScratch scratch;  // the decoded pixels wait here until written into the batch slot
  EncodedImage encoded;   // the file for the GPU, swapped into the batch slot once loaded
  Shared::WorkerSlot& slot = s.slots[static_cast<size_t>(id)];
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.work_cv.wait(lock, [&] { return s.stop || !s.tasks.empty(); });
    if (s.stop) break;
    const Task task = s.tasks.front();
    s.tasks.pop_front();
    ++s.active;
    Pending& pending = *task.pending;
    const int64_t epoch = pending.epoch;
    const BatchMemory memory = pending.batch.memory;
    slot.sample = task.sample;
    slot.since = std::chrono::steady_clock::now();
    if (s.check_ahead) s.check_ahead->loader_at(epoch, pending.batch.index * o.batch_size + task.position + 1);
    lock.unlock();

    int bad = 0;
    int64_t label = 0;
    EncodedImage* const mine = memory.encoded ? &encoded : nullptr;
    std::exception_ptr error;
    if (mine) {
      // A fresh record around the worker's buffer: a file the CPU decodes must not carry the crop or size of
      // whichever sample this record (swapped around the batch slots) held before.
      std::vector<uint8_t> bytes = std::move(encoded.bytes);
      encoded = EncodedImage{};
      encoded.bytes = std::move(bytes);
    }
    try {
      if (o.before_load) o.before_load(task.sample);
      bad = dataset.load(task.sample, o.seed, epoch, nullptr, &label, scratch, mine);
    } catch (const DataError&) {
      error = std::current_exception();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(
          DataError("worker failed on " + dataset.folder().samples[task.sample].path + ": " + e.what()));
    } catch (...) {
      error = std::make_exception_ptr(
          DataError("worker failed on " + dataset.folder().samples[task.sample].path + ": unknown error"));
    }

    lock.lock();
    if (s.stop) {  // the arena may be gone: the sample is dropped (see Shared)
      --s.active;
      break;
    }
    slot.writing = true;
    lock.unlock();
    if (!error) {
      if (!mine || encoded.kind == JpegRoute::kCpu) {
        const TransformOptions& t = dataset.transform_at(epoch);  // the epoch's side: images lie at its stride
        write_resized(scratch, t, static_cast<uint8_t*>(memory.images) + task.position * bytes_per_image(t.format, t.size));
      }
      memory.labels[task.position] = label;
      if (mine) std::swap(memory.encoded[task.position], encoded);  // the buffers trade places: nothing copied
    }
    lock.lock();
    slot.writing = false;
    slot.sample = -1;
    --s.active;
    pending.batch.bad_images += bad;
    if (error && !pending.error) pending.error = error;
    if (--pending.remaining == 0 || s.active == 0) s.done_cv.notify_all();
  }
  slot.sample = -1;
  slot.exited = true;
  s.done_cv.notify_all();
}

}  // namespace pinfeed::data

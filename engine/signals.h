// Ctrl-C and SIGTERM. During start-up (scan, model, checkpoint read: nothing worth saving yet) the first ends
// the process at once with exit code 130. Once training has started (training_started()), the first asks the
// loops to finish their step, save and stop; a second stops at once. Stopping at once says so in one line. Stopping at once removes the temp file of
// a write_file_atomic in progress, so an interrupted checkpoint save leaves the previous last.pt and no
// last.pt.tmp behind.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

namespace pinfeed::engine {

// A request to stop, which the loops that are handed it look at between steps (a step is never cut short). Set
// by the signal handler, or by the program itself (train's --stop-after-steps). One lock-free atomic flag and
// nothing else, so that setting it from a signal handler is async-signal-safe.
class StopRequest {
 public:
  constexpr StopRequest() = default;
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  bool requested() const { return requested_.load(); }
  void request() { requested_ = true; }
  // request(), and whether this was the first (for the handler: a second signal stops at once).
  bool request_first() { return !requested_.exchange(true); }

 private:
  std::atomic<bool> requested_{false};
};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

void install_signal_handlers();
// The request Ctrl-C and SIGTERM make once training has started: the one main hands `train` and `bench`.
StopRequest& signal_stop();
// From here on the first signal is a request to stop (signal_stop()), no longer an immediate exit; if the process
// is still running `stop_deadline` after that request, it exits at once (130), saying so in one line.
constexpr std::chrono::milliseconds kStopDeadline{60'000};
void training_started(std::chrono::milliseconds stop_deadline = kStopDeadline);

// What the data loaders and the feeder ask while they wait for a batch (data::LoaderOptions::stop_requested):
// true once `stop` has been requested for `grace_s` seconds. A stop normally ends the loop at the next step
// boundary (every rank at one agreed step), and batches keep coming until then; a wait is cut short, with
// data::Interrupted, only when no batch came for that long after the request: a read or decode that never
// returns, so that Ctrl-C still ends the run.
std::function<bool()> stop_after_grace(const StopRequest& stop, double grace_s = 5.0);

// While alive, stopping at once on a signal removes `path` first (several threads' at once: the training
// thread's atomic writes and the checkpoint writer's).
class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const std::string& path);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

 private:
  int slot_ = -1;  // the slot holding the path; -1: none (too long, or every slot taken)
};

}  // namespace pinfeed::engine

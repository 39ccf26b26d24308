// Ctrl-C and SIGTERM. During start-up (scan, model, checkpoint read: nothing worth saving yet) the first ends
// the process at once with exit code 130. Once training has started (training_started()), the first asks the
// loops to finish their step, save and stop; a second stops at once. Stopping at once removes the temp file of
// a write_file_atomic in progress, so an interrupted checkpoint save leaves the previous last.pt and no
// last.pt.tmp behind.
#pragma once

#include <atomic>
#include <string>

namespace pinfeed::app {

extern std::atomic<bool> g_stop_requested;
void install_signal_handlers();
// From here on the first signal is a request to stop (g_stop_requested), no longer an immediate exit.
void training_started();

// While alive, stopping at once on a signal removes `path` first (one at a time: the atomic writes of the
// training thread).
class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const std::string& path);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;
};

}  // namespace pinfeed::app

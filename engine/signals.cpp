#include "engine/signals.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <iterator>
#include <memory>
#include <thread>

#include "engine/exit_codes.h"

namespace pinfeed::engine {

namespace {

StopRequest g_signal_stop;  // constant-initialised: ready before any handler can run
std::atomic<bool> g_started{false};
// The files to remove before an immediate exit: one slot per thread in a write (the training thread's, the
// checkpoint writer's). Fixed buffers: the handler may only make async-signal-safe calls (unlink, _exit), no
// allocation.
enum PartialState : int { kFree, kFilling, kArmed };
struct PartialFile {
  char path[4096];
  std::atomic<int> state{kFree};
};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
PartialFile g_partial[4];
std::atomic<bool> g_stderr_tty{false};  // a progress line may be open there: the line below starts a new one

// One line on stderr with write(2), the one way to print that is async-signal-safe.
void say(const char* line) {
  if (g_stderr_tty.load()) (void)!::write(STDERR_FILENO, "\n", 1);
  (void)!::write(STDERR_FILENO, line, std::strlen(line));
}

std::atomic<bool> g_signalled{false};  // a signal asked to stop (not the program itself): the deadline runs

extern "C" void on_stop_signal(int) {
  const bool started = g_started.load();
  if (started && g_signal_stop.request_first()) {  // the first, in training: stop after the step
    g_signalled = true;
    return;
  }
  // Start-up, or a second signal: stop now. A write being made is cut short; its temp file goes with it.
  for (PartialFile& p : g_partial) {
    if (p.state.load() == kArmed) ::unlink(p.path);
  }
  say(started ? "warning: stopped at once by a second signal: nothing was saved (a checkpoint written before is "
                "kept)\n"
              : "warning: interrupted during start-up: nothing was saved\n");
  ::_exit(kExitInterrupted);
}

}  // namespace

void install_signal_handlers() {
  g_stderr_tty = ::isatty(STDERR_FILENO) == 1;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

StopRequest& signal_stop() { return g_signal_stop; }

void training_started(std::chrono::milliseconds stop_deadline) {
  if (g_started.exchange(true)) return;
  // A stop that never completes (a GPU fault left the teardown waiting on the device, a file that never returns
  // past the loaders' grace) still ends the process: one line, exit 130, what was written before is kept.
  std::thread([stop_deadline] {
    while (!g_signalled.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::this_thread::sleep_for(stop_deadline);
    say("error: still running after the stop was asked for (a stuck device or file): stopped at once; a "
        "checkpoint written before is kept\n");
    ::_exit(kExitInterrupted);
  }).detach();
}

// A path too long to keep, or no slot free: only the start-up clean-up of the run folder removes that file.
RemoveOnSignal::RemoveOnSignal(const std::string& path) {
  if (path.size() >= sizeof PartialFile::path) return;
  for (int i = 0; i < static_cast<int>(std::size(g_partial)); ++i) {
    int free = kFree;
    if (!g_partial[i].state.compare_exchange_strong(free, kFilling)) continue;
    std::memcpy(g_partial[i].path, path.c_str(), path.size() + 1);
    g_partial[i].state = kArmed;  // seq_cst: the handler sees the whole path once it sees it armed
    slot_ = i;
    return;
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  if (slot_ >= 0) g_partial[slot_].state = kFree;
}

std::function<bool()> stop_after_grace(const StopRequest& stop, double grace_s) {
  using Clock = std::chrono::steady_clock;
  // Called under the loader's lock, from several threads: atomics only. 0: no request seen yet.
  auto first_seen = std::make_shared<std::atomic<int64_t>>(0);
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s)).count();
  return [&stop, first_seen, grace] {
    if (!stop.requested()) return false;
    const int64_t now = Clock::now().time_since_epoch().count();
    int64_t seen = 0;
    if (first_seen->compare_exchange_strong(seen, now)) seen = now;
    return now - seen >= grace;
  };
}

}  // namespace pinfeed::engine

#include "app/signals.h"

#include <csignal>

namespace pinfeed::app {

std::atomic<bool> g_stop_requested{false};

namespace {
extern "C" void on_stop_signal(int sig) {
  g_stop_requested = true;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C stops at once
}
}  // namespace

void install_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

}  // namespace pinfeed::app

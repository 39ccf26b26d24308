// Ctrl-C and SIGTERM: the first asks the loops to finish their step, save and stop; a second stops at once.
#pragma once

#include <atomic>

namespace pinfeed::app {

extern std::atomic<bool> g_stop_requested;
void install_signal_handlers();

}  // namespace pinfeed::app

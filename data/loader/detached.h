// Threads of the data module left running at shutdown: a loader worker or a file-check thread that did not return
// in time (a read that never returns, a decoder looping inside its library) is detached instead of joined, so that
// destroying its Loader or CheckAhead cannot hang. Each keeps alive, through shared ownership, everything it can
// still touch, and never writes into memory its owner may have freed (data/loader/loader_shared.h says how).
#pragma once

#include <atomic>

namespace pinfeed::data {

inline std::atomic<int>& detached_thread_count() {
  static std::atomic<int> count{0};
  return count;
}

// How many threads were left running so far in this process. Such a thread may still run while the process ends:
// exit() then destroys static objects (the logger's, the libraries') under it. A process that left any behind
// should flush its output and end with std::_Exit, which destroys nothing.
inline int detached_threads() { return detached_thread_count().load(); }

}  // namespace pinfeed::data

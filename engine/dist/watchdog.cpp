// PeerWatchdog: the heartbeat and watcher threads, and rank 0 waiting for the others before its store goes.
#include "engine/dist/watchdog.h"

#include <algorithm>
#include <cstdlib>
#include <exception>

#include "engine/exit_codes.h"
#include "common/log.h"

namespace pinfeed::engine {

std::string who_key(int rank) { return "pinfeed/rank/" + std::to_string(rank); }
std::string alive_key(int rank) { return "pinfeed/alive/" + std::to_string(rank); }
std::string left_key(int rank) { return "pinfeed/left/" + std::to_string(rank); }

std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string to_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

std::string stop_line(const std::string& failure) {
  const size_t colon = failure.find(':'), space = failure.find(' ', 5);
  const bool own_error = failure.rfind("rank ", 0) == 0 && colon != std::string::npos && colon < space;
  return own_error ? "stopped because " + failure : failure;
}

[[noreturn]] void park() {
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void PeerWatchdog::start(c10::intrusive_ptr<c10d::Store> store) {
  store_ = std::move(store);
  store_answered_ = Clock::now().time_since_epoch().count();
  watcher_ = std::thread([this] { watch_peers(); });
  if (!env_.hosts_store()) alarm_ = std::thread([this] { watch_store(); });
}

void PeerWatchdog::joined(std::vector<std::string> who) {
  who_ = std::move(who);
  joined_ = true;
}

void PeerWatchdog::leave(c10d::Store& store) noexcept {
  leaving_ = true;
  try {
    store.set(left_key(env_.rank), to_bytes("1"));
  } catch (const std::exception&) {
  }
}

void PeerWatchdog::stop() noexcept {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (alarm_.joinable()) alarm_.join();
}

void PeerWatchdog::watch_store() {
  while (!stop_watch_) {
    std::this_thread::sleep_for(kHeartbeatEvery);
    const Clock::time_point answered{Clock::duration(store_answered_.load())};
    if (stop_watch_ || Clock::now() - answered < kStaleAfter) continue;
    // Whichever thread is stopping may itself be blocked on the store: this one ends the process regardless.
    if (!announced_.exchange(true)) log::error(store_gone());
    std::_Exit(kExitPeerFailed);
  }
}

std::string PeerWatchdog::who(int rank) const {
  const std::string r = "rank " + std::to_string(rank);
  // who_ is complete, and no longer written, once joined_ is set (the alarm thread may ask before).
  return joined_ && rank < static_cast<int>(who_.size()) ? r + " (" + who_[rank] + ")" : r;
}

std::string PeerWatchdog::store_gone() const {
  const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
  if (env_.agent_store) return "torchrun's store at " + where + " no longer answers (the launcher is gone)";
  return who(0) + " stopped answering: the store it serves at " + where + " no longer answers";
}

void PeerWatchdog::watch_peers() {
  // Rank 0 watches every rank; the others watch rank 0 (and its store), and learn of any other death from the
  // failure rank 0 records.
  std::vector<int> watched;
  for (int r = 0; r < env_.world; ++r) {
    if (r != env_.rank && (env_.rank == 0 || r == 0)) watched.push_back(r);
  }
  std::vector<std::string> keys;
  for (int r : watched) keys.push_back(alive_key(r));
  std::vector<int64_t> beat(watched.size(), -1);
  std::vector<Clock::time_point> moved(watched.size(), Clock::now());
  std::vector<bool> left(watched.size(), false);
  const std::string own = "rank " + std::to_string(env_.rank) + ":";
  while (!stop_watch_) {
    std::this_thread::sleep_for(kHeartbeatEvery);
    if (stop_watch_) return;
    try {
      store_->add(alive_key(env_.rank), 1);
      store_answered_ = Clock::now().time_since_epoch().count();
      if (leaving_ || !joined_) continue;
      if (store_->check({kFailureKey})) {
        const std::string failure = to_text(store_->get(kFailureKey));
        if (failure.rfind(own, 0) != 0) return stop_for_peer(stop_line(failure), {});
      }
      const auto values = store_->multiGet(keys);
      const Clock::time_point now = Clock::now();
      store_answered_ = now.time_since_epoch().count();
      const auto limit = collective_failed_ ? kStaleAfterFailure : kStaleAfter;
      std::vector<int> dead;
      for (size_t i = 0; i < watched.size(); ++i) {
        if (left[i]) continue;
        const int64_t value = std::stoll(to_text(values[i]));
        if (value != beat[i]) {
          beat[i] = value;
          moved[i] = now;
        } else if (now - moved[i] >= limit) {
          if (store_->check({left_key(watched[i])})) left[i] = true;  // done with the group, not dead
          else dead.push_back(watched[i]);
        }
      }
      if (dead.empty()) continue;
      std::string line;
      for (int r : dead) line += (line.empty() ? "" : ", ") + who(r);
      line += " stopped answering: no heartbeat for " + std::to_string(limit.count()) + " s";
      // The first failure recorded wins: a rank that reported its own error and then exited is named by it.
      const std::string first = to_text(store_->compareSet(kFailureKey, {}, to_bytes(line)));
      return stop_for_peer(first == line ? line : stop_line(first), dead);
    } catch (const std::exception&) {
      // The store no longer answers. Rank 0 serves it (unless torchrun's agent does): then rank 0 is gone.
      if (leaving_ || stop_watch_ || !joined_ || env_.hosts_store()) return;
      return stop_for_peer(store_gone(), {0});
    }
  }
}

void PeerWatchdog::stop_for_peer(const std::string& line, const std::vector<int>& dead) {
  if (stopping_.exchange(true)) return;  // the training thread is already stopping for the same reason
  if (!announced_.exchange(true)) log::error(line);
  // Say so in the store, unless the store is what is gone (its calls would only wait out their timeout).
  if (env_.hosts_store() || std::find(dead.begin(), dead.end(), 0) == dead.end()) leave(*store_);
  if (env_.hosts_store()) wait_for_others_to_leave(*store_, dead, kStaleAfter, kStaleAfterFailure);
  // The process ends here, from this thread, without unwinding the training thread: that one may be blocked
  // in a collective that can never complete. Gloo would give up after dist.timeout_s; an NCCL collective waits
  // on the GPU for the peer, and cannot be interrupted from the host safely (ProcessGroupNCCL::abort() from
  // this thread can itself block behind the communicator the training thread is using). Ending the process
  // releases the GPU, and its communicator, through the driver. Every file of the run is replaced atomically,
  // so nothing half-written stays behind.
  std::_Exit(kExitPeerFailed);
}

void PeerWatchdog::wait_for_others_to_leave(c10d::Store& store, const std::vector<int>& dead,
                                           std::chrono::milliseconds bound, std::chrono::milliseconds silent) {
  const Clock::time_point deadline = Clock::now() + bound;
  struct Peer {
    int rank;
    int64_t beat;
    Clock::time_point moved;
  };
  std::vector<Peer> waiting;
  try {
    for (int r = 0; r < env_.world; ++r) {
      // A rank that never joined, or already found dead, is not waited for.
      if (r == env_.rank || std::find(dead.begin(), dead.end(), r) != dead.end() || !store.check({who_key(r)})) {
        continue;
      }
      waiting.push_back({r, -1, Clock::now()});
    }
    while (!waiting.empty() && Clock::now() < deadline) {
      store.add(alive_key(env_.rank), 1);  // still here: the others must not take this wait for a death
      for (size_t i = waiting.size(); i-- > 0;) {
        Peer& p = waiting[i];
        const int64_t beat = std::stoll(to_text(store.get(alive_key(p.rank))));
        if (beat != p.beat) {
          p.beat = beat;
          p.moved = Clock::now();
        }
        if (store.check({left_key(p.rank)}) || Clock::now() - p.moved >= silent) {
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception&) {
  }
}

}  // namespace pinfeed::engine

// The peer watchdog: each rank's heartbeat in the store, and the threads that end this process when a peer is gone.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "engine/dist/dist_env.h"

namespace pinfeed::engine {

// How ranks learn that another is gone. Every rank bumps a heartbeat key in the store from a thread of its own;
// rank 0 watches every rank's, every other rank watches rank 0's and the store itself (rank 0 serves it, so a
// dead rank 0 shows as a store that closed, a stopped one as a store whose calls no longer return). A heartbeat
// that has not moved for kStaleAfter names its rank as stopped answering: the thread is independent of the training thread, so a long step, an evaluation or a
// checkpoint never stops it; only a dead, stopped (SIGSTOP) or swapped-out process does.
constexpr std::chrono::milliseconds kHeartbeatEvery{500};
constexpr std::chrono::seconds kStaleAfter{10};
// After a collective failed on this rank (Gloo sees a peer's closed connection at once), a peer is judged on a
// shorter silence: the failure already says something is wrong, the heartbeat only says who.
constexpr std::chrono::seconds kStaleAfterFailure{3};

// The store's keys: the first failure of any rank; per rank, who it is ("host H, pid P", written when it joins),
// its heartbeat (a counter), and that it left the group on its own (so that its silence afterwards is not taken
// for a death).
inline constexpr const char* kFailureKey = "pinfeed/failure";
std::string who_key(int rank);
std::string alive_key(int rank);
std::string left_key(int rank);
std::vector<uint8_t> to_bytes(const std::string& s);
std::string to_text(const std::vector<uint8_t>& b);
// What a rank prints for the first failure recorded in the store: a rank's own error ("rank R: ...") is
// introduced; a watcher's verdict ("rank R (host H, pid P) stopped answering: ...") is already a sentence.
std::string stop_line(const std::string& failure);
// Another thread is printing why the run stops and ending the process (exit 5): nothing is left for this one
// to do, and unwinding it could print a second, less precise line.
[[noreturn]] void park();

class PeerWatchdog {
 public:
  explicit PeerWatchdog(const DistEnv& env) : env_(env) {}
  ~PeerWatchdog() { stop(); }
  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

  // Starts beating this rank's heartbeat on `store`, a connection of its own (so that it never waits behind a
  // collective's key), and watching; off the store's host, also the alarm.
  void start(c10::intrusive_ptr<c10d::Store> store);
  void joined(std::vector<std::string> who);  // every rank has arrived (each one's "host H, pid P"): judge heartbeats
  void collective_failed() { collective_failed_ = true; }  // judge on kStaleAfterFailure
  bool stopping() const { return stopping_; }
  bool claim_stop() { return stopping_.exchange(true); }  // false for the one thread that handles the stop
  // This rank is done with the group: says so in `store`; heartbeats only, no judging.
  void leave(c10d::Store& store) noexcept;
  // Rank 0, serving the store: waits until every other rank has left or been silent for `silent` (except
  // `dead`), at most `bound`, so that none of them sees the store vanish before it has read why the run stops
  // (or, at the end of a run, before it has finished).
  void wait_for_others_to_leave(c10d::Store& store, const std::vector<int>& dead, std::chrono::milliseconds bound,
                                std::chrono::milliseconds silent);
  void stop() noexcept;  // a watcher blocked on a stopped store is ended by the alarm
  std::string who(int rank) const;  // "rank R (host H, pid P)"
  std::string store_gone() const;   // why a non-zero rank's store calls fail: the rank serving it is gone

 private:
  using Clock = std::chrono::steady_clock;
  void watch_peers();
  void watch_store();  // alarm_
  // Prints `line` and ends the process with exit 5, unless the training thread is already stopping.
  void stop_for_peer(const std::string& line, const std::vector<int>& dead);

  DistEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<std::string> who_;  // each rank's "host H, pid P", filled once every rank has joined
  std::thread watcher_;  // beats this rank's heartbeat; exits this process (code 5) when another rank is gone
  // A store call does not time out when the process serving the store is stopped rather than dead (its socket
  // stays open): this thread ends the process when the watcher's calls have not returned for kStaleAfter.
  std::thread alarm_;
  std::atomic<int64_t> store_answered_{0};  // Clock ticks of the watcher's last store call that returned
  std::atomic<bool> stop_watch_{false};
  std::atomic<bool> joined_{false};   // every rank has arrived: the watcher may judge heartbeats
  std::atomic<bool> leaving_{false};  // this rank is done with the group: heartbeats only, no judging
  std::atomic<bool> collective_failed_{false};  // judge on kStaleAfterFailure
  std::atomic<bool> stopping_{false};   // one thread handles the stop
  std::atomic<bool> announced_{false};  // and one line says why
};

}  // namespace pinfeed::engine

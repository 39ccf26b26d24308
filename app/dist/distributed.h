// Data parallelism on PyTorch's own engine: one process per GPU, started by torchrun (or srun/mpirun with
// MASTER_ADDR/MASTER_PORT set), meeting through a c10d::TCPStore, talking through c10d's NCCL backend on CUDA
// and Gloo on the CPU. With none of the launcher's variables set, world size is 1 and nothing here runs a
// collective.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pinfeed::app {

// This rank stopped because another failed first; what() names that rank and its error. Exit code 5.
class PeerFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where this process sits, from the launcher's environment.
struct DistEnv {
  int rank = 0, world = 1;              // RANK, WORLD_SIZE (SLURM_PROCID/NTASKS, OMPI_COMM_WORLD_*)
  int local_rank = 0, local_world = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE: this host's share
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun hosts the store, every rank is a client
  std::string restart = "0";  // TORCHELASTIC_RESTART_COUNT: keys of an earlier attempt are never read
};
// Throws ConfigError for a partial or malformed set of variables.
DistEnv dist_env_from_environment();

// How ranks learn that another is gone. Every rank bumps a heartbeat key in the store from a thread of its own;
// rank 0 watches every rank's, every other rank watches rank 0's and the store itself (rank 0 serves it, so a
// dead rank 0 shows as a store that closed, a stopped one as a store whose calls no longer return). A heartbeat that has not moved for kStaleAfter names its rank as
// stopped answering: the thread is independent of the training thread, so a long step, an evaluation or a
// checkpoint never stops it; only a dead, stopped (SIGSTOP) or swapped-out process does.
constexpr std::chrono::milliseconds kHeartbeatEvery{500};
constexpr std::chrono::seconds kStaleAfter{10};
// After a collective failed on this rank (Gloo sees a peer's closed connection at once), a peer is judged on a
// shorter silence: the failure already says something is wrong, the heartbeat only says who.
constexpr std::chrono::seconds kStaleAfterFailure{3};

class Distributed {
 public:
  // Joins the group; world 1: no group at all. backend: "nccl" or "gloo".
  // timeout (dist.timeout_s) bounds joining: each rank announces itself in the store and waits for the others,
  // saying every 10 s which ranks it still waits for; past timeout it throws PeerFailed naming the ranks that
  // never joined (for rank 0 missing: nothing answered at MASTER_ADDR:MASTER_PORT). timeout also bounds every
  // collective inside the backend; a rank that dies is named sooner, by the heartbeats (kStaleAfter).
  Distributed(const DistEnv& env, c10::Device device, const std::string& backend, std::chrono::seconds timeout);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  bool active() const { return env_.world > 1; }
  bool is_main() const { return env_.rank == 0; }
  const DistEnv& env() const { return env_; }
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }

  // Rank 0's values into every rank's tensors, in place (one flattened broadcast per dtype).
  void broadcast(const std::vector<at::Tensor>& tensors);
  void all_reduce_sum(at::Tensor& tensor);  // in place; waits
  void all_reduce_mean(const std::vector<at::Tensor>& tensors);  // in place; waits (floating tensors only)
  bool any(bool local);                     // true if any rank says true; waits
  // Every rank's values, rank-major: result[r * values.size() + i].
  std::vector<double> all_gather(const std::vector<double>& values);
  // Every rank's tensor (same shape and dtype on every rank), flattened and stacked: (world, numel), on this
  // rank's device; one rank: values as (1, numel).
  at::Tensor all_gather_rows(const at::Tensor& values);
  // Every rank's bytes, any length each, in rank order; one rank: {value}.
  std::vector<std::string> all_gather_bytes(const std::string& value);
  // Rank 0 publishes `value` under `key`; every other rank compares its own and throws ConfigError naming
  // what differs. Returns rank 0's value on every rank.
  std::string agree(const std::string& key, const std::string& value, const std::string& what);
  std::string share(const std::string& key, const std::string& value);  // rank 0's value, on every rank

  // The first failure of any rank, for the others to name it: "rank R: message", or "rank R (host H, pid P)
  // stopped answering: ..." when a watcher found R gone. Safe to call on a broken group; returns "" when there
  // is none or the store is gone.
  void report_failure(const std::string& message);
  std::string first_failure();
  // Runs body; if it throws in a group, reports the failure and, when another rank failed first, throws
  // PeerFailed naming it instead. A failed collective is not reported as this rank's own: it is what a dead
  // peer looks like from here, so this waits (about kStaleAfterFailure, at most kStaleAfter + 3 s) for the
  // watcher to name the peer, which ends the process with exit 5.
  template <class F>
  auto guard(F&& body) -> decltype(body());

 private:
  using Clock = std::chrono::steady_clock;
  // connect_timeout bounds reaching the store; timeout then bounds each call on it.
  c10::intrusive_ptr<c10d::Store> connect(std::chrono::milliseconds connect_timeout,
                                          std::chrono::milliseconds timeout) const;
  void connect_main_store(Clock::time_point deadline);
  void join(Clock::time_point deadline);
  void watch_peers();
  void watch_store();  // alarm_
  bool hosts_store() const { return env_.rank == 0 && !env_.agent_store; }
  std::string who(int rank) const;  // "rank R (host H, pid P)"
  std::string store_gone() const;   // why a non-zero rank's store calls fail: the rank serving it is gone
  // Prints `line` and ends the process with exit 5, unless the training thread is already stopping.
  void stop_for_peer(const std::string& line, const std::vector<int>& dead);
  // Rank 0, serving the store: waits until every other rank has left or been silent for `silent` (except
  // `dead`), at most `bound`, so that none of them sees the store vanish before it has read why the run stops
  // (or, at the end of a run, before it has finished).
  void wait_for_others_to_leave(c10d::Store& store, const std::vector<int>& dead, std::chrono::milliseconds bound,
                                std::chrono::milliseconds silent);
  void leave(c10d::Store& store) noexcept;
  void stop_watcher() noexcept;
  std::string failure_of_peer(const std::exception& error);  // "" unless another rank failed first

  DistEnv env_;
  c10::Device device_;
  std::chrono::seconds timeout_{0};
  c10::intrusive_ptr<c10d::Store> store_, watch_store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
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

template <class F>
auto Distributed::guard(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (!active()) throw;
    if (const std::string peer = failure_of_peer(e); !peer.empty()) throw PeerFailed(peer);
    throw;
  }
}

}  // namespace pinfeed::app

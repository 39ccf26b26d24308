// The group of ranks a data-parallel run trains with: joining it, its collectives, and who failed first.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/dist/dist_env.h"
#include "engine/dist/watchdog.h"

namespace pinfeed::engine {

// This rank stopped because another failed first; what() names that rank and its error. Exit code 5.
class PeerFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Data parallelism on PyTorch's own engine: one process per GPU, started by torchrun (or srun/mpirun with
// MASTER_ADDR/MASTER_PORT set), meeting through a c10d::TCPStore, talking through c10d's NCCL backend on CUDA
// and Gloo on the CPU. With none of the launcher's variables set, world size is 1 and nothing here runs a
// collective.
class Distributed {
 public:
  // Joins the group; world 1: no group at all, unless one_rank_group (dist.one_rank_group): then a group of this
  // rank alone over an in-process store, whose backend() the gradient all-reduce runs through (the multi-rank
  // step on one device) while every other collective here stays a no-op. backend: "nccl" or "gloo".
  // timeout (dist.timeout_s) bounds joining: each rank announces itself in the store and waits for the others,
  // saying every 10 s which ranks it still waits for; past timeout it throws PeerFailed naming the ranks that
  // never joined (for rank 0 missing: nothing answered at MASTER_ADDR:MASTER_PORT). timeout also bounds every
  // collective inside the backend; a rank that dies is named sooner, by the heartbeats (kStaleAfter).
  Distributed(const DistEnv& env, c10::Device device, const std::string& backend, std::chrono::seconds timeout,
              bool one_rank_group = false);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  bool active() const { return env_.world > 1; }  // several ranks
  bool grouped() const { return static_cast<bool>(backend_); }  // a backend to all-reduce gradients through
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
  // Rank 0 publishes `value` under `key`; every other rank compares its own and throws RankSetupError naming
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
  c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& backend) const;  // over store_
  void connect_main_store(Clock::time_point deadline);
  void join(Clock::time_point deadline);
  std::string failure_of_peer(const std::exception& error);  // "" unless another rank failed first

  DistEnv env_;
  c10::Device device_;
  std::chrono::seconds timeout_{0};
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  PeerWatchdog watchdog_{env_};  // after env_, which it copies
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

}  // namespace pinfeed::engine

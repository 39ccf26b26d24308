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

class Distributed {
 public:
  // Joins the group (blocks until every rank has arrived or `timeout` passes); world 1: no group at all.
  // backend: "nccl" or "gloo". timeout also bounds every collective.
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

  // The first failure of any rank, for the others to name it: "rank R: message". Safe to call on a broken
  // group; returns "" when there is none or the store is gone.
  void report_failure(const std::string& message);
  std::string first_failure();
  // Runs body; if it throws in a group, reports the failure and, when another rank failed first, throws
  // PeerFailed naming it instead.
  template <class F>
  auto guard(F&& body) -> decltype(body());

 private:
  void watch_peers();

  DistEnv env_;
  c10::Device device_;
  c10::intrusive_ptr<c10d::Store> store_, watch_store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::thread watcher_;  // exits this process when another rank reports a failure
  std::atomic<bool> stop_watch_{false};
};

template <class F>
auto Distributed::guard(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (!active()) throw;
    report_failure(e.what());
    const std::string first = first_failure();
    if (!first.empty() && first.rfind("rank " + std::to_string(rank()) + ":", 0) != 0) {
      throw PeerFailed("stopped because " + first);
    }
    throw;
  }
}

}  // namespace pinfeed::app

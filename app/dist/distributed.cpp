#include "app/dist/distributed.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <sstream>

#include "app/config/config.h"
#include "app/config/exit_codes.h"
#include "common/log.h"
#include "pipeline/nccl.h"

namespace pinfeed::app {
namespace {

constexpr const char* kFailureKey = "pinfeed/failure";

std::string getenv_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, int fallback, int lo, int hi) {
  std::string v = getenv_or(name);
  if (v.empty()) return fallback;
  // Slurm writes SLURM_NTASKS_PER_NODE as "4", or "4(x2),3" for uneven nodes: the leading count is taken
  // (it sizes the decode threads per rank).
  if (std::string(name) == "SLURM_NTASKS_PER_NODE") v = v.substr(0, v.find_first_not_of("0123456789"));
  try {
    size_t used = 0;
    const long n = std::stol(v, &used);
    if (used == v.size() && n >= lo && n <= hi) return static_cast<int>(n);
  } catch (const std::exception&) {
  }
  throw ConfigError("environment: " + std::string(name) + "=" + v + " must be an integer in [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
}

// The first launcher whose rank variable is set: torchrun, then Slurm, then Open MPI.
void read_ranks(DistEnv& e) {
  struct Names {
    const char *rank, *world, *local_rank, *local_world;
  };
  const Names launchers[] = {{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
                             {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
                             {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                              "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  for (const Names& n : launchers) {
    if (getenv_or(n.rank).empty()) continue;
    e.world = env_int(n.world, -1, 1, 1 << 20);
    if (e.world < 0) throw ConfigError(std::string("environment: ") + n.rank + " is set but " + n.world + " is not");
    e.rank = env_int(n.rank, 0, 0, e.world - 1);
    e.local_world = env_int(n.local_world, 1, 1, e.world);
    e.local_rank = env_int(n.local_rank, 0, 0, e.local_world - 1);
    return;
  }
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  read_ranks(e);
  if (e.world == 1) return e;
  e.master_addr = getenv_or("MASTER_ADDR");
  if (e.master_addr.empty()) {
    throw ConfigError("environment: WORLD_SIZE = " + std::to_string(e.world) +
                      " but MASTER_ADDR is not set (torchrun sets it; with srun or mpirun export MASTER_ADDR and "
                      "MASTER_PORT)");
  }
  e.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  e.agent_store = getenv_or("TORCHELASTIC_USE_AGENT_STORE") == "True";
  e.restart = getenv_or("TORCHELASTIC_RESTART_COUNT", "0");
  return e;
}

Distributed::Distributed(const DistEnv& env, c10::Device device, const std::string& backend,
                         std::chrono::seconds timeout)
    : env_(env), device_(device) {
  if (env_.world == 1) return;
  log::set_rank(env_.rank, env_.world);
  auto connect = [&] {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(env_.master_port);
    // Under torchrun its agent already serves the store on MASTER_PORT: every rank, rank 0 too, is a client.
    o.isServer = !env_.agent_store && env_.rank == 0;
    o.numWorkers = env_.world;
    o.waitWorkers = false;
    o.timeout = timeout;
    o.multiTenant = true;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o);
    // The agent's store outlives a restarted worker group: keys of an earlier attempt must not be read.
    return c10::make_intrusive<c10d::PrefixStore>("pinfeed/attempt_" + env_.restart, tcp);
  };
  store_ = connect();
  if (backend == "nccl") {
    backend_ = pipeline::make_nccl_backend(store_, env_.rank, env_.world, device.index(), timeout);
  } else {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // The local end of Gloo's connections; on several hosts set GLOO_SOCKET_IFNAME (as for Python's Gloo).
    const std::string ifname = getenv_or("GLOO_SOCKET_IFNAME");
    options->devices.push_back(ifname.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                              : c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    options->threads = 2;
    backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env_.rank, env_.world, options);
  }
  watch_store_ = connect();  // a connection of its own: the watcher never waits behind a collective's key
  watcher_ = std::thread([this] { watch_peers(); });
}

Distributed::~Distributed() {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (!backend_) return;
  try {
    // As destroy_process_group(): NCCL's communicators are torn down in order, not left to process exit.
    // After a failure another rank may never answer, so the communicators are aborted instead of waited on.
    if (std::uncaught_exceptions() > 0) backend_->abort();
    else backend_->shutdown();
  } catch (const std::exception&) {
  }
}

void Distributed::watch_peers() {
  while (!stop_watch_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    try {
      if (!watch_store_->check({kFailureKey})) continue;
      const auto bytes = watch_store_->get(kFailureKey);
      const std::string failure(bytes.begin(), bytes.end());
      if (failure.rfind("rank " + std::to_string(env_.rank) + ":", 0) == 0) continue;  // our own report
      log::error("stopping: " + failure);
      std::_Exit(kExitPeerFailed);  // files are written atomically: nothing half-written stays behind
    } catch (const std::exception&) {
      return;  // the store is gone (rank 0 or the agent exited): the collectives will fail on their own
    }
  }
}

void Distributed::report_failure(const std::string& message) {
  if (!active()) return;
  try {
    const std::string text = "rank " + std::to_string(env_.rank) + ": " + message;
    // compareSet with an empty expected value: set only if no rank has reported first.
    store_->compareSet(kFailureKey, {}, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {
  }
}

std::string Distributed::first_failure() {
  if (!active()) return "";
  try {
    if (!store_->check({kFailureKey})) return "";
    const auto bytes = store_->get(kFailureKey);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return "";
  }
}

void Distributed::broadcast(const std::vector<at::Tensor>& tensors) {
  if (!active() || tensors.empty()) return;
  std::map<c10::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : group) flat_parts.push_back(t.detach().reshape(-1));
    std::vector<at::Tensor> flat{at::cat(flat_parts)};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    backend_->broadcast(flat, o)->wait();
    int64_t offset = 0;
    for (auto& t : group) {
      t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

void Distributed::all_reduce_sum(at::Tensor& tensor) {
  if (!active()) return;
  std::vector<at::Tensor> v{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  backend_->allreduce(v, o)->wait();
}

void Distributed::all_reduce_mean(const std::vector<at::Tensor>& tensors) {
  if (!active() || tensors.empty()) return;
  std::vector<at::Tensor> parts;
  for (const auto& t : tensors) parts.push_back(t.detach().to(at::kFloat).reshape(-1));
  at::Tensor flat = at::cat(parts);
  all_reduce_sum(flat);
  flat.div_(env_.world);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

bool Distributed::any(bool local) {
  if (!active()) return local;
  at::Tensor flag = at::tensor({local ? 1.0f : 0.0f}).to(device_);
  all_reduce_sum(flag);
  return flag.item<float>() > 0;
}

std::vector<double> Distributed::all_gather(const std::vector<double>& values) {
  if (!active()) return values;
  const at::Tensor all = all_gather_rows(at::tensor(values, at::TensorOptions().dtype(at::kDouble))).cpu().contiguous();
  const double* p = all.data_ptr<double>();
  return std::vector<double>(p, p + all.numel());
}

at::Tensor Distributed::all_gather_rows(const at::Tensor& values) {
  const at::Tensor mine = values.detach().reshape(-1).to(device_).contiguous();
  if (!active()) return mine.unsqueeze(0);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < env_.world; ++r) out[0].push_back(at::empty_like(mine));
  std::vector<at::Tensor> in{mine};
  backend_->allgather(out, in)->wait();
  return at::stack(out[0]);
}

std::vector<std::string> Distributed::all_gather_bytes(const std::string& value) {
  if (!active()) return {value};
  // The lengths first, then every rank's bytes padded to the longest (the collective needs equal sizes).
  const at::Tensor lengths =
      all_gather_rows(at::tensor({static_cast<int64_t>(value.size())}, at::TensorOptions().dtype(at::kLong))).cpu();
  const int64_t longest = lengths.max().item<int64_t>();
  std::vector<std::string> out(env_.world);
  if (longest == 0) return out;  // the usual case: one small collective
  at::Tensor mine = at::zeros({longest}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(mine.data_ptr(), value.data(), value.size());
  const at::Tensor all = all_gather_rows(mine).cpu().contiguous();
  const char* bytes = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < env_.world; ++r) out[r].assign(bytes + r * longest, lengths[r][0].item<int64_t>());
  return out;
}

std::string Distributed::share(const std::string& key, const std::string& value) {
  if (!active()) return value;
  const std::string full = "pinfeed/" + key;
  if (is_main()) store_->set(full, std::vector<uint8_t>(value.begin(), value.end()));
  const auto bytes = store_->get(full);  // waits for rank 0, within the store's timeout
  return std::string(bytes.begin(), bytes.end());
}

std::string Distributed::agree(const std::string& key, const std::string& value, const std::string& what) {
  const std::string main = share(key, value);
  if (main == value) return main;
  // Name the first line that differs.
  std::istringstream a(main), b(value);
  std::string la, lb;
  int line = 0;
  while (true) {
    ++line;
    const bool more_a = static_cast<bool>(std::getline(a, la)), more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) break;
    if (!more_a || !more_b || la != lb) break;
  }
  throw ConfigError("this rank's " + what + " differs from rank 0's at line " +
                    std::to_string(line) + ": rank 0 has '" + la + "', this rank has '" + lb +
                    "' (every rank must run the same command)");
}

}  // namespace pinfeed::app

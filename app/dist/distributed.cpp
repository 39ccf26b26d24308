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

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <sstream>
#include <typeinfo>

#include "app/config/config.h"
#include "app/config/exit_codes.h"
#include "common/log.h"
#include "gpu/nccl.h"

namespace pinfeed::app {
namespace {

constexpr const char* kFailureKey = "pinfeed/failure";
// Per rank: who it is ("host H, pid P", written when it joins), its heartbeat (a counter), and that it left the
// group on its own (so that its silence afterwards is not taken for a death).
std::string who_key(int rank) { return "pinfeed/rank/" + std::to_string(rank); }
std::string alive_key(int rank) { return "pinfeed/alive/" + std::to_string(rank); }
std::string left_key(int rank) { return "pinfeed/left/" + std::to_string(rank); }
constexpr std::chrono::seconds kReportEvery{10};  // a rank waiting for others to join says so this often

std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string to_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

// "rank 3", "ranks 1, 3-5".
std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (i ? ", " : "") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

// Another thread is printing why the run stops and ending the process (exit 5): nothing is left for this one
// to do, and unwinding it could print a second, less precise line.
[[noreturn]] void park() {
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

long seconds(std::chrono::steady_clock::duration d) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

// An exception's text without LibTorch's stack frames (c10::Error::what() carries them).
std::string error_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// A failure of the group rather than of this rank's own work: c10d's errors (store, NCCL), and Gloo's. Gloo
// throws its own exception types (gloo::IoException for a peer's closed connection); LibTorch ships neither
// their headers nor their symbols, so they are told by the namespace in their type's name.
bool is_group_error(const std::exception& e) {
  if (dynamic_cast<const c10::DistError*>(&e)) return true;
  return std::string(typeid(e).name()).find("gloo") != std::string::npos;
}

// What a rank prints for the first failure recorded in the store: a rank's own error ("rank R: ...") is
// introduced; a watcher's verdict ("rank R (host H, pid P) stopped answering: ...") is already a sentence.
std::string stop_line(const std::string& failure) {
  const size_t colon = failure.find(':'), space = failure.find(' ', 5);
  const bool own_error = failure.rfind("rank ", 0) == 0 && colon != std::string::npos && colon < space;
  return own_error ? "stopped because " + failure : failure;
}

// c10d logs every failed store call and every broken connection as a warning with a dozen stack frames, on
// every surviving rank; the run names the rank at fault in one line instead (Distributed::watch_peers).
// TORCH_CPP_LOG_LEVEL, PyTorch's own switch for these logs, still shows them when set.
void quiet_c10d_logs() {
  const char* level = std::getenv("TORCH_CPP_LOG_LEVEL");
  if (!level || !*level) FLAGS_caffe2_log_level = 3;  // c10's FATAL: nothing below it is printed
}

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
    : env_(env), device_(device), timeout_(timeout) {
  if (env_.world == 1) return;
  log::set_rank(env_.rank, env_.world);
  quiet_c10d_logs();
  const Clock::time_point deadline = Clock::now() + timeout_;
  connect_main_store(deadline);
  try {
    // The heartbeat exists before the rank says it has joined: a rank seen as joined can always be watched.
    store_->add(alive_key(env_.rank), 1);
    // A connection of its own, so the watcher never waits behind a collective's key. A store that closed
    // fails its calls at once; one whose process is stopped leaves them blocked, which the alarm thread sees.
    watch_store_ = connect(timeout_, kStaleAfter);
    store_answered_ = Clock::now().time_since_epoch().count();
    watcher_ = std::thread([this] { watch_peers(); });
    if (!hosts_store()) alarm_ = std::thread([this] { watch_store(); });
    join(deadline);
    if (backend == "nccl") {
      backend_ = pipeline::make_nccl_backend(store_, env_.rank, env_.world, device.index(), timeout_);
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
      // The local end of Gloo's connections; on several hosts set GLOO_SOCKET_IFNAME (as for Python's Gloo).
      const std::string ifname = getenv_or("GLOO_SOCKET_IFNAME");
      options->devices.push_back(ifname.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                                : c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      options->threads = 2;
      backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env_.rank, env_.world, options);
    }
  } catch (const std::exception& e) {
    if (stopping_.exchange(true)) park();  // the watcher is saying why and ending the process
    if (!dynamic_cast<const PeerFailed*>(&e)) report_failure(error_text(e));
    leave(*store_);
    if (hosts_store()) wait_for_others_to_leave(*store_, {}, kStaleAfter, kStaleAfterFailure);
    stop_watcher();
    throw;
  }
}

c10::intrusive_ptr<c10d::Store> Distributed::connect(std::chrono::milliseconds connect_timeout,
                                                     std::chrono::milliseconds timeout) const {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env_.master_port);
  // Under torchrun its agent already serves the store on MASTER_PORT: every rank, rank 0 too, is a client.
  o.isServer = hosts_store();
  o.numWorkers = env_.world;
  o.waitWorkers = false;
  o.timeout = connect_timeout;
  o.multiTenant = true;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o);
  tcp->setTimeout(timeout);
  // The agent's store outlives a restarted worker group: keys of an earlier attempt must not be read.
  return c10::make_intrusive<c10d::PrefixStore>("pinfeed/attempt_" + env_.restart, tcp);
}

// A rank other than the store's host tries to connect in short slices until the deadline, saying what it waits
// for, so that a rank 0 that never started is named rather than left to c10d's own timeout text.
void Distributed::connect_main_store(Clock::time_point deadline) {
  if (hosts_store()) {
    store_ = connect(timeout_, timeout_);
    return;
  }
  const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
  const Clock::time_point start = Clock::now();
  Clock::time_point next_report = start + kReportEvery;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      store_ = connect(std::clamp(left, std::chrono::milliseconds(200), std::chrono::milliseconds(2000)), timeout_);
      return;
    } catch (const c10::Error&) {
    }
    const Clock::time_point now = Clock::now();
    const std::string server = env_.agent_store ? "torchrun's store" : "rank 0's store";
    if (now >= deadline) {
      throw PeerFailed(std::string(env_.agent_store ? "torchrun's store" : "rank 0") +
                       " never joined: nothing answered at MASTER_ADDR:MASTER_PORT = " + where +
                       " within dist.timeout_s = " + std::to_string(timeout_.count()) +
                       " s (start every rank with the same MASTER_ADDR and MASTER_PORT)");
    }
    if (now >= next_report) {
      log::info("waiting for " + server + " at " + where + " (" + std::to_string(seconds(now - start)) +
                " s of dist.timeout_s = " + std::to_string(timeout_.count()) + " s)");
      next_report += kReportEvery;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Every rank writes who it is, then waits in short slices until every rank has: it says every kReportEvery
// which ranks are missing, stops at once when another rank has already given up or failed, and at the deadline
// names the ranks that never came.
void Distributed::join(Clock::time_point deadline) {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  store_->set(who_key(env_.rank), to_bytes("host " + std::string(host) + ", pid " + std::to_string(::getpid())));
  std::vector<std::string> keys;
  for (int r = 0; r < env_.world; ++r) keys.push_back(who_key(r));
  auto missing = [&] {
    std::vector<int> out;
    for (int r = 0; r < env_.world; ++r) {
      if (!store_->check({keys[r]})) out.push_back(r);
    }
    return out;
  };
  const Clock::time_point start = Clock::now();
  Clock::time_point next_report = start + kReportEvery;
  try {
    while (!store_->check(keys)) {
      if (store_->check({kFailureKey})) {
        const std::string first = to_text(store_->get(kFailureKey));
        if (first.rfind("rank " + std::to_string(env_.rank) + ":", 0) != 0) throw PeerFailed(stop_line(first));
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        const std::vector<int> absent = missing();
        const std::string line = rank_list(absent) + " never joined within dist.timeout_s = " +
                                 std::to_string(timeout_.count()) + " s (not started, or started with another " +
                                 "MASTER_ADDR, MASTER_PORT or WORLD_SIZE)";
        // The first rank to give up speaks for all: the others read its line and stop too.
        const std::string first = to_text(store_->compareSet(kFailureKey, {}, to_bytes(line)));
        throw PeerFailed(first == line ? line : stop_line(first));
      }
      if (now >= next_report) {
        log::info("waiting for " + rank_list(missing()) + " to join (" + std::to_string(seconds(now - start)) +
                  " s of dist.timeout_s = " + std::to_string(timeout_.count()) + " s)");
        next_report += kReportEvery;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (const auto& bytes : store_->multiGet(keys)) who_.push_back(to_text(bytes));
  } catch (const c10::Error&) {
    throw PeerFailed(store_gone());  // the store's calls failed: its host is gone
  }
  joined_ = true;
}

Distributed::~Distributed() {
  if (!active()) return;
  const bool failing = std::uncaught_exceptions() > 0;
  if (backend_) {
    try {
      // As destroy_process_group(): NCCL's communicators are torn down in order, not left to process exit.
      // After a failure another rank may never answer, so the communicators are aborted instead of waited on.
      if (failing) backend_->abort();
      else backend_->shutdown();
    } catch (const std::exception&) {
    }
  }
  leave(*store_);
  // At the end of a run the other ranks may still be finishing; after a failure they still have to read it
  // (every live rank does so within a heartbeat, so a shorter silence is taken for a dead one).
  if (hosts_store()) {
    if (failing) wait_for_others_to_leave(*store_, {}, kStaleAfter, kStaleAfterFailure);
    else wait_for_others_to_leave(*store_, {}, timeout_, kStaleAfter);
  }
  stop_watcher();
}

void Distributed::leave(c10d::Store& store) noexcept {
  leaving_ = true;
  try {
    store.set(left_key(env_.rank), to_bytes("1"));
  } catch (const std::exception&) {
  }
}

void Distributed::stop_watcher() noexcept {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();  // a watcher blocked on a stopped store is ended by the alarm
  if (alarm_.joinable()) alarm_.join();
}

void Distributed::watch_store() {
  while (!stop_watch_) {
    std::this_thread::sleep_for(kHeartbeatEvery);
    const Clock::time_point answered{Clock::duration(store_answered_.load())};
    if (stop_watch_ || Clock::now() - answered < kStaleAfter) continue;
    // Whichever thread is stopping may itself be blocked on the store: this one ends the process regardless.
    if (!announced_.exchange(true)) log::error(store_gone());
    std::_Exit(kExitPeerFailed);
  }
}

std::string Distributed::who(int rank) const {
  const std::string r = "rank " + std::to_string(rank);
  // who_ is complete, and no longer written, once joined_ is set (the alarm thread may ask before).
  return joined_ && rank < static_cast<int>(who_.size()) ? r + " (" + who_[rank] + ")" : r;
}

std::string Distributed::store_gone() const {
  const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
  if (env_.agent_store) return "torchrun's store at " + where + " no longer answers (the launcher is gone)";
  return who(0) + " stopped answering: the store it serves at " + where + " no longer answers";
}

void Distributed::watch_peers() {
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
      watch_store_->add(alive_key(env_.rank), 1);
      store_answered_ = Clock::now().time_since_epoch().count();
      if (leaving_ || !joined_) continue;
      if (watch_store_->check({kFailureKey})) {
        const std::string failure = to_text(watch_store_->get(kFailureKey));
        if (failure.rfind(own, 0) != 0) return stop_for_peer(stop_line(failure), {});
      }
      const auto values = watch_store_->multiGet(keys);
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
          if (watch_store_->check({left_key(watched[i])})) left[i] = true;  // done with the group, not dead
          else dead.push_back(watched[i]);
        }
      }
      if (dead.empty()) continue;
      std::string line;
      for (int r : dead) line += (line.empty() ? "" : ", ") + who(r);
      line += " stopped answering: no heartbeat for " + std::to_string(limit.count()) + " s";
      // The first failure recorded wins: a rank that reported its own error and then exited is named by it.
      const std::string first = to_text(watch_store_->compareSet(kFailureKey, {}, to_bytes(line)));
      return stop_for_peer(first == line ? line : stop_line(first), dead);
    } catch (const std::exception&) {
      // The store no longer answers. Rank 0 serves it (unless torchrun's agent does): then rank 0 is gone.
      if (leaving_ || stop_watch_ || !joined_ || hosts_store()) return;
      return stop_for_peer(store_gone(), {0});
    }
  }
}

void Distributed::stop_for_peer(const std::string& line, const std::vector<int>& dead) {
  if (stopping_.exchange(true)) return;  // the training thread is already stopping for the same reason
  if (!announced_.exchange(true)) log::error(line);
  // Say so in the store, unless the store is what is gone (its calls would only wait out their timeout).
  if (hosts_store() || std::find(dead.begin(), dead.end(), 0) == dead.end()) leave(*watch_store_);
  if (hosts_store()) wait_for_others_to_leave(*watch_store_, dead, kStaleAfter, kStaleAfterFailure);
  // The process ends here, from this thread, without unwinding the training thread: that one may be blocked
  // in a collective that can never complete. Gloo would give up after dist.timeout_s; an NCCL collective waits
  // on the GPU for the peer, and cannot be interrupted from the host safely (ProcessGroupNCCL::abort() from
  // this thread can itself block behind the communicator the training thread is using). Ending the process
  // releases the GPU, and its communicator, through the driver. Every file of the run is replaced atomically,
  // so nothing half-written stays behind.
  std::_Exit(kExitPeerFailed);
}

void Distributed::wait_for_others_to_leave(c10d::Store& store, const std::vector<int>& dead,
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

void Distributed::report_failure(const std::string& message) {
  if (!active()) return;
  try {
    const std::string text = "rank " + std::to_string(env_.rank) + ": " + message;
    // compareSet with an empty expected value: set only if no rank has reported first.
    store_->compareSet(kFailureKey, {}, to_bytes(text));
  } catch (const std::exception&) {
  }
}

std::string Distributed::first_failure() {
  if (!active()) return "";
  try {
    if (!store_->check({kFailureKey})) return "";
    return to_text(store_->get(kFailureKey));
  } catch (const std::exception&) {
    return "";
  }
}

std::string Distributed::failure_of_peer(const std::exception& error) {
  if (dynamic_cast<const PeerFailed*>(&error)) return "";  // already names the peer
  const std::string own = "rank " + std::to_string(env_.rank) + ":";
  auto from_peer = [&](const std::string& first) { return !first.empty() && first.rfind(own, 0) != 0; };
  std::string first;
  if (is_group_error(error)) {
    // What a dead peer looks like from here (Gloo: "Connection reset by peer" at once). The watcher names the
    // peer within about kStaleAfterFailure and ends the process; rank 0 may name it first through the store.
    // Only if neither happens is the error this rank's own.
    collective_failed_ = true;
    const Clock::time_point deadline = Clock::now() + kStaleAfter + std::chrono::seconds(3);
    while (Clock::now() < deadline && !stopping_ && !from_peer(first = first_failure())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (!from_peer(first)) {
    report_failure(error_text(error));
    first = first_failure();
  }
  if (stopping_.exchange(true)) park();  // the watcher is saying why and ending the process
  return from_peer(first) ? stop_line(first) : "";
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

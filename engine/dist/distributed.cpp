// Distributed: joining the group through the store, the collectives, and naming the rank that failed first.
#include "engine/dist/distributed.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
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

#include "engine/errors.h"
#include "engine/exit_codes.h"
#include "common/log.h"
#include "gpu/nccl.h"
#include "pipeline/error_text.h"

namespace pinfeed::engine {
namespace {

constexpr std::chrono::seconds kReportEvery{10};  // a rank waiting for others to join says so this often

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

long seconds(std::chrono::steady_clock::duration d) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

// A failure of the group rather than of this rank's own work: c10d's errors (store, NCCL), and Gloo's. Gloo
// throws its own exception types (gloo::IoException for a peer's closed connection); LibTorch ships neither
// their headers nor their symbols, so they are told by the namespace in their type's name.
bool is_group_error(const std::exception& e) {
  if (dynamic_cast<const c10::DistError*>(&e)) return true;
  return std::string(typeid(e).name()).find("gloo") != std::string::npos;
}

// c10d logs every failed store call and every broken connection as a warning with a dozen stack frames, on
// every surviving rank; the run names the rank at fault in one line instead (watchdog.h).
// TORCH_CPP_LOG_LEVEL, PyTorch's own switch for these logs, still shows them when set.
void quiet_c10d_logs() {
  const char* level = std::getenv("TORCH_CPP_LOG_LEVEL");
  if (!level || !*level) FLAGS_caffe2_log_level = 3;  // c10's FATAL: nothing below it is printed
}

}  // namespace

Distributed::Distributed(const DistEnv& env, c10::Device device, const std::string& backend,
                         std::chrono::seconds timeout, bool one_rank_group)
    : env_(env), device_(device), timeout_(timeout) {
  if (env_.world == 1) {
    if (!one_rank_group) return;
    // No other rank to meet or watch: an in-process store, and the group's collectives over this rank alone.
    store_ = c10::make_intrusive<c10d::HashStore>();
    backend_ = make_backend(backend);
    log::info("one rank in a group of its own (dist.one_rank_group): gradients all-reduced through " + backend);
    return;
  }
  log::set_rank(env_.rank, env_.world);
  quiet_c10d_logs();
  const Clock::time_point deadline = Clock::now() + timeout_;
  connect_main_store(deadline);
  try {
    // The heartbeat exists before the rank says it has joined: a rank seen as joined can always be watched.
    store_->add(alive_key(env_.rank), 1);
    // A connection of its own, so the watcher never waits behind a collective's key. A store that closed
    // fails its calls at once; one whose process is stopped leaves them blocked, which the alarm thread sees.
    watchdog_.start(connect(timeout_, kStaleAfter));
    join(deadline);
    backend_ = make_backend(backend);
  } catch (const std::exception& e) {
    if (watchdog_.claim_stop()) park();  // the watcher is saying why and ending the process
    if (!dynamic_cast<const PeerFailed*>(&e)) report_failure(error_text(e));
    watchdog_.leave(*store_);
    if (env_.hosts_store()) watchdog_.wait_for_others_to_leave(*store_, {}, kStaleAfter, kStaleAfterFailure);
    watchdog_.stop();
    throw;
  }
}

c10::intrusive_ptr<c10d::Backend> Distributed::make_backend(const std::string& backend) const {
  if (backend == "nccl") return gpu::make_nccl_backend(store_, env_.rank, env_.world, device_.index(), timeout_);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
  // The local end of Gloo's connections; on several hosts set GLOO_SOCKET_IFNAME (as for Python's Gloo).
  const char* env_ifname = std::getenv("GLOO_SOCKET_IFNAME");
  const std::string ifname = env_ifname ? env_ifname : "";
  options->devices.push_back(ifname.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                            : c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env_.rank, env_.world, options);
}

c10::intrusive_ptr<c10d::Store> Distributed::connect(std::chrono::milliseconds connect_timeout,
                                                     std::chrono::milliseconds timeout) const {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env_.master_port);
  // Under torchrun its agent already serves the store on MASTER_PORT: every rank, rank 0 too, is a client.
  o.isServer = env_.hosts_store();
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
  if (env_.hosts_store()) {
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
    std::vector<std::string> who;
    for (const auto& bytes : store_->multiGet(keys)) who.push_back(to_text(bytes));
    watchdog_.joined(std::move(who));
  } catch (const c10::Error&) {
    throw PeerFailed(watchdog_.store_gone());  // the store's calls failed: its host is gone
  }
}

Distributed::~Distributed() {
  const bool failing = std::uncaught_exceptions() > 0;
  if (backend_) {  // several ranks, or one in a group of its own
    try {
      // As destroy_process_group(): NCCL's communicators are torn down in order, not left to process exit.
      // After a failure another rank may never answer, so the communicators are aborted instead of waited on.
      if (failing) backend_->abort();
      else backend_->shutdown();
    } catch (const std::exception&) {
    }
  }
  if (!active()) return;
  watchdog_.leave(*store_);
  // At the end of a run the other ranks may still be finishing; after a failure they still have to read it
  // (every live rank does so within a heartbeat, so a shorter silence is taken for a dead one).
  if (env_.hosts_store()) {
    if (failing) watchdog_.wait_for_others_to_leave(*store_, {}, kStaleAfter, kStaleAfterFailure);
    else watchdog_.wait_for_others_to_leave(*store_, {}, timeout_, kStaleAfter);
  }
  watchdog_.stop();
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
    watchdog_.collective_failed();
    const Clock::time_point deadline = Clock::now() + kStaleAfter + std::chrono::seconds(3);
    while (Clock::now() < deadline && !watchdog_.stopping() && !from_peer(first = first_failure())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (!from_peer(first)) {
    report_failure(error_text(error));
    first = first_failure();
  }
  if (watchdog_.claim_stop()) park();  // the watcher is saying why and ending the process
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
  throw RankSetupError("this rank's " + what + " differs from rank 0's at line " +
                    std::to_string(line) + ": rank 0 has '" + la + "', this rank has '" + lb +
                    "' (every rank must run the same command)");
}

}  // namespace pinfeed::engine

// Multi-process tests: each rank is a fresh process (never a fork of a process that has touched LibTorch,
// OpenCV's pool or CUDA), started with the launcher's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as torchrun would set them.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace pinfeed::test {

// A port nobody listens on now (the kernel's pick).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct RankExit {
  int code = -1;        // exit status, or 128 + signal
  double seconds = 0;   // from start to exit
};

// What a fault test does to the ranks besides starting them.
struct RankControl {
  std::vector<int> absent;  // ranks never started: the others wait for them as for a launcher that failed
  // Called about every 20 ms while ranks run, with each rank's pid (0 once it has exited or was never
  // started): a test signals a rank from here once the run has reached the point it wants.
  std::function<void(const std::vector<pid_t>&)> poll;
};

// Starts `argv` once per rank (stderr of rank r into log_prefix + r + ".log" when log_prefix is given), waits
// for all of them at most `limit_s` seconds (then kills what is left: code 137), returns each rank's exit
// (a rank in control.absent: code -1).
inline std::vector<RankExit> run_ranks(int world, const std::vector<std::string>& argv, double limit_s,
                                       const std::vector<std::string>& extra_env = {},
                                       const std::string& log_prefix = "", const RankControl& control = {}) {
  const int port = free_port();
  std::vector<pid_t> pids;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    if (std::find(control.absent.begin(), control.absent.end(), r) != control.absent.end()) {
      pids.push_back(0);
      continue;
    }
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (const auto& kv : {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                           "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=" + std::to_string(world),
                           std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port)}) {
      env.push_back(kv);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = log_prefix.empty() ? "" : log_prefix + std::to_string(r) + ".log";
    if (!log.empty()) posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  std::vector<RankExit> exits(world);
  int left = world - static_cast<int>(control.absent.size());
  while (left > 0) {
    if (control.poll) control.poll(pids);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < world; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        exits[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        exits[r].seconds = elapsed;
        pids[r] = 0;
        --left;
      } else if (elapsed > limit_s) {
        ::kill(pids[r], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exits;
}

}  // namespace pinfeed::test

#include "app/run/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "app/config/config.h"
#include "app/run/run_files.h"

namespace pinfeed::app {
namespace fs = std::filesystem;
namespace {

std::string lock_path(const std::string& dir) { return (fs::path(dir) / "run.lock").string(); }

// The lock file's descriptor with the lock taken; -1 when another process holds it. Throws OutputError when the
// file cannot be made.
int take(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // CLOEXEC: no child inherits it
  if (fd < 0) throw engine::OutputError("cannot create " + path + ": " + std::strerror(errno));
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return -1;
    throw engine::OutputError("cannot lock " + path + ": " + std::strerror(err));
  }
  // The holder's pid, for the message another process prints; not needed for the lock itself.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // A full disk: the lock holds all the same, only the pid is missing.
  }
  return fd;
}

}  // namespace

RunLock::RunLock(const std::string& dir) : dir_(dir), fd_(take(dir)) {
  if (fd_ >= 0) return;
  const long holder = run_lock_holder(dir);
  throw ConfigError("run folder " + dir + " is in use by another pinfeed process" +
                    (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                    ": one process writes a run folder at a time; wait for it to end or stop it");
}

std::optional<RunLock> RunLock::try_take(const std::string& dir) {
  const int fd = take(dir);
  if (fd < 0) return std::nullopt;
  return RunLock(dir, fd);
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RunLock::RunLock(RunLock&& other) noexcept : dir_(std::move(other.dir_)), fd_(other.fd_) { other.fd_ = -1; }

long run_lock_holder(const std::string& dir) {
  const int fd = ::open(lock_path(dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[32] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return n > 0 ? std::strtol(text, nullptr, 10) : 0;
}

std::vector<std::string> remove_abandoned_temp_files(const std::string& runs_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(runs_dir, ec)) {
    if (!run.is_directory(ec) || !fs::exists(run.path() / "run.lock", ec)) continue;  // never a pinfeed run folder
    bool any = false;
    for (const auto& entry : fs::directory_iterator(run.path(), ec)) {
      any = any || engine::is_pinfeed_temp_name(entry.path().filename().string());
    }
    if (!any) continue;
    try {
      const std::optional<RunLock> lock = RunLock::try_take(run.path().string());
      if (!lock) continue;  // a live writer: its temp files are writes in progress
      for (const std::string& name : engine::remove_stale_temp_files(run.path().string())) {
        removed.push_back((run.path() / name).string());
      }
    } catch (const engine::OutputError&) {
      // a folder this process cannot write: not its business
    }
  }
  return removed;
}

}  // namespace pinfeed::app

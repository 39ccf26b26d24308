// One writer per run folder: an advisory lock (flock) on <run folder>/run.lock, held by the process that writes
// the folder (rank 0) for as long as it runs. Two `pinfeed train --resume` of one run would otherwise append
// the same epochs twice and replace each other's checkpoint. The kernel drops the lock when the process ends,
// however it ends (kill -9 included), so a lock is never stale; the file stays, holding the last holder's pid.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pinfeed::app {

class RunLock {
 public:
  // Takes the lock of run folder `dir`, or throws ConfigError naming the folder and the holder's pid (exit 2).
  // OutputError when the lock file cannot be made (a read-only folder).
  explicit RunLock(const std::string& dir);
  // The lock if no other process holds it, else nullopt.
  static std::optional<RunLock> try_take(const std::string& dir);
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  RunLock(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  std::string dir_;
  int fd_ = -1;
};

// The pid that run folder `dir`'s lock file names (its latest holder, alive or not), or 0.
long run_lock_holder(const std::string& dir);

// In each run folder under runs_dir that no process holds, removes the temp files pinfeed's own writes left
// (is_pinfeed_temp_name): the orphan of a first checkpoint cut short by kill -9, in a folder that can never be
// resumed, would otherwise stay for good. Folders another process writes are left alone. Returns the paths removed.
std::vector<std::string> remove_abandoned_temp_files(const std::string& runs_dir);

}  // namespace pinfeed::app

// Files a run writes: atomic whole-file writes (temp, fsync, rename) and append-only metric logs whose
// earlier lines a failed write can never damage.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace pinfeed::app {

// Writing the run's outputs failed (disk full, permissions). Exit code 4.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `bytes` to path.tmp, fsyncs it, renames it over path and fsyncs the directory: a reader sees the
// old file or the new one, never a torn one.
void write_file_atomic(const std::string& path, const char* bytes, size_t size);
inline void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}
std::vector<char> read_file_bytes(const std::string& path);

// Removes the *.tmp files directly in dir (what a write_file_atomic cut short by kill -9 or a power loss
// leaves: up to a whole checkpoint); returns their names.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

// Appends whole lines; each append is flushed and fsynced, so a crash or a full disk loses at most the
// line being written. Opening drops such a torn last line (one without its newline), so the next line
// starts on a line of its own.
class AppendFile {
 public:
  AppendFile() = default;
  explicit AppendFile(const std::string& path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;

  bool is_open() const { return file_ != nullptr; }
  bool empty() const;  // nothing written yet (so a CSV needs its header)
  void append(const std::string& line, bool sync = true);  // adds the newline

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// runs/<YYYYmmdd-HHMMSS>-<name>, created; throws OutputError.
std::string make_run_dir(const std::string& dir, const std::string& name);
// The newest run directory under dir whose name ends in -<name> and that holds last.pt, or "".
std::string find_last_run(const std::string& dir, const std::string& name);

}  // namespace pinfeed::app

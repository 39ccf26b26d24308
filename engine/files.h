// Files the engine and the run write: atomic whole-file writes (temp, fsync, rename) and append-only metric logs whose
// earlier lines a failed write can never damage.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace pinfeed::engine {

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

// Whether `name` is the temp file of a write_file_atomic of a file pinfeed writes in a run folder (last.pt.tmp,
// metrics.csv.tmp, run.json.tmp, config.resume-2.toml.tmp, ...): what a write cut short by kill -9 or a power
// loss leaves. Any other *.tmp is a user's file.
bool is_pinfeed_temp_name(const std::string& name);
// Removes those temp files directly in dir (up to a whole checkpoint each) and nothing else; returns their names.
// Only the process holding the folder's RunLock may call it: another writer's temp file is not stale.
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

}  // namespace pinfeed::engine

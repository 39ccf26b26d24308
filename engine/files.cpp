#include "engine/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/signals.h"

namespace pinfeed::engine {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw OutputError("cannot " + what + " " + path + ": " + std::strerror(err));
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Cuts a file back to just after its last newline (nothing to do when it ends in one or is empty).
void drop_torn_last_line(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;  // not there yet: the fopen that follows creates it or names the error
  const off_t size = ::lseek(fd, 0, SEEK_END);
  char block[4096];
  if (size <= 0 || ::pread(fd, block, 1, size - 1) != 1 || block[0] == '\n') {
    ::close(fd);
    return;
  }
  off_t keep = 0, end = size;
  while (end > 0 && keep == 0) {
    const off_t start = end > static_cast<off_t>(sizeof block) ? end - static_cast<off_t>(sizeof block) : 0;
    if (::pread(fd, block, static_cast<size_t>(end - start), start) != end - start) {
      ::close(fd);  // unreadable: leave it as it is rather than cut good lines
      return;
    }
    for (off_t i = end - start - 1; i >= 0; --i) {
      if (block[i] == '\n') {
        keep = start + i + 1;
        break;
      }
    }
    end = start;
  }
  const int err = ::ftruncate(fd, keep) != 0 ? errno : 0;
  ::close(fd);
  if (err) fail("truncate", path, err);
}

}  // namespace

void write_file_atomic(const std::string& path, const char* bytes, size_t size) {
  const std::string tmp = path + ".tmp";
  const RemoveOnSignal remove_if_cut_short(tmp);  // a second Ctrl-C while this runs leaves no temp file
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", tmp, errno);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  const int sync_err = ::fsync(fd) != 0 ? errno : 0;
  const int close_err = ::close(fd) != 0 ? errno : 0;  // closed either way: a failed fsync must not leak it
  if (sync_err || close_err) {
    ::unlink(tmp.c_str());
    fail("flush", tmp, sync_err ? sync_err : close_err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("rename into", path, err);
  }
  fsync_dir(fs::path(path).parent_path().string().empty() ? "." : fs::path(path).parent_path().string());
}

std::vector<char> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

AppendFile::AppendFile(const std::string& path) : path_(path) {
  drop_torn_last_line(path);
  file_ = std::fopen(path.c_str(), "ab");
  if (!file_) fail("open", path, errno);
}

AppendFile::~AppendFile() {
  if (file_) std::fclose(file_);
}

AppendFile::AppendFile(AppendFile&& o) noexcept : path_(std::move(o.path_)), file_(o.file_) { o.file_ = nullptr; }

AppendFile& AppendFile::operator=(AppendFile&& o) noexcept {
  if (this != &o) {
    if (file_) std::fclose(file_);
    path_ = std::move(o.path_);
    file_ = o.file_;
    o.file_ = nullptr;
  }
  return *this;
}

bool AppendFile::empty() const { return std::ftell(file_) == 0; }

void AppendFile::append(const std::string& line, bool sync) {
  const std::string text = line + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    fail("append to", path_, errno);
  }
  if (sync && ::fsync(::fileno(file_)) != 0) fail("sync", path_, errno);
}

bool is_pinfeed_temp_name(const std::string& name) {
  static const char* const kWritten[] = {"last.pt", "best.pt", "config.toml", "run.json", "metrics.jsonl",
                                         "metrics.csv", "steps.jsonl", "bad_images.tsv"};
  const std::string suffix = ".tmp";
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  const std::string file = name.substr(0, name.size() - suffix.size());
  for (const char* written : kWritten) {
    if (file == written) return true;
  }
  // config.resume-<N>.toml: the config of each resume (run_outputs.h)
  const std::string head = "config.resume-", tail = ".toml";
  if (file.size() <= head.size() + tail.size() || file.compare(0, head.size(), head) != 0 ||
      file.compare(file.size() - tail.size(), tail.size(), tail) != 0) {
    return false;
  }
  const std::string n = file.substr(head.size(), file.size() - head.size() - tail.size());
  return n.find_first_not_of("0123456789") == std::string::npos;
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!is_pinfeed_temp_name(entry.path().filename().string()) || !entry.is_regular_file(ec)) continue;
    if (fs::remove(entry.path(), ec)) removed.push_back(entry.path().filename().string());
  }
  return removed;
}

}  // namespace pinfeed::engine

#include "app/run/run_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "app/run/signals.h"

namespace pinfeed::app {
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
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("flush", tmp, err);
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

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".tmp" || !entry.is_regular_file(ec)) continue;
    if (fs::remove(entry.path(), ec)) removed.push_back(entry.path().filename().string());
  }
  return removed;
}

std::string make_run_dir(const std::string& dir, const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::string path = (fs::path(dir) / (std::string(stamp) + "-" + name)).string();
  for (int i = 2; fs::exists(path); ++i) path = (fs::path(dir) / (std::string(stamp) + "-" + name + "-" + std::to_string(i))).string();
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw OutputError("cannot create run directory " + path + ": " + ec.message());
  return path;
}

std::string find_last_run(const std::string& dir, const std::string& name) {
  std::string best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string run = entry.path().filename().string();
    const std::string suffix = "-" + name;
    const bool named = run.size() > suffix.size() && run.compare(run.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (named && fs::exists(entry.path() / "last.pt") && run > fs::path(best).filename().string()) {
      best = entry.path().string();
    }
  }
  return best;
}

}  // namespace pinfeed::app

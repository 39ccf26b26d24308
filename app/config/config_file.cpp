// Reading a config file as hostile input: a regular file of at most kMaxConfigBytes, never blocking.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "app/config/config.h"

namespace pinfeed::app {
namespace {

// What a file of this mode is, for the message refusing it.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The file's text, refused unless it is a regular file of at most kMaxConfigBytes. Opened non-blocking and
// checked on the open descriptor, so a FIFO cannot stall the open and a file swapped in between cannot slip by;
// the read stops at the limit whatever the size said, so /dev/zero-like files cannot exhaust memory either.
std::string read_config_file(const std::string& path) {
  const std::string fix = "; pass the path of a TOML config file (e.g. configs/quickstart.toml)";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ConfigError(path + ": cannot open config file: " + std::strerror(err) +
                      (err == EACCES ? " (check its permissions)" : fix));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw ConfigError(path + ": cannot stat config file: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw ConfigError(path + ": the config file is " + file_kind(st.st_mode) + ", not a regular file" + fix);
  }
  const std::string too_big = path + ": the config file is larger than the 1 MiB limit for a config (" +
                              std::to_string(kMaxConfigBytes) + " bytes); is this the right file?";
  if (st.st_size > kMaxConfigBytes) throw ConfigError(too_big);
  std::string text(static_cast<size_t>(kMaxConfigBytes) + 1, '\0');
  size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ConfigError(path + ": cannot read config file: " + std::strerror(errno));
    }
    have += static_cast<size_t>(n);
  }
  if (have > static_cast<size_t>(kMaxConfigBytes)) throw ConfigError(too_big);
  text.resize(have);
  return text;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_config_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    // Said plainly: otherwise the first complaint would be the missing data.root, as if the file had been read.
    throw ConfigError(path + ":1:1: the config file is empty; it needs at least [data] root = \"PATH\" "
                      "(configs/quickstart.toml is a complete example; pinfeed help config lists every key)");
  }
  return parse_config_string(text, path, overrides);
}

}  // namespace pinfeed::app

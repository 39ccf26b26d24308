#include "common/log.h"

#include <cstdio>
#include <ctime>
#include <mutex>

namespace pinfeed::log {
namespace {

std::mutex g_mutex;
bool g_status_open = false;  // a redrawn status line is on screen without its newline
std::string g_prefix;        // "[rank R] " in a data-parallel run
std::FILE* g_tee = nullptr;  // run.log, or null

// Under g_mutex. Line-buffered by hand: a kill -9 loses nothing already printed.
void to_tee(const std::string& line) {
  if (!g_tee) return;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S ", &tm);
  std::fprintf(g_tee, "%s%s\n", stamp, line.c_str());
  std::fflush(g_tee);
}

void emit(const char* prefix, const std::string& raw) {
  const std::string message = printable(raw, /*keep_line_breaks=*/true);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_status_open) {
    std::fputc('\n', stderr);
    g_status_open = false;
  }
  std::fprintf(stderr, "%s%s%s\n", g_prefix.c_str(), prefix, message.c_str());
  std::fflush(stderr);
  to_tee(g_prefix + prefix + message);
}

}  // namespace

std::string printable(const std::string& text, bool keep_line_breaks) {
  std::string out;
  out.reserve(text.size());
  for (const unsigned char ch : text) {
    const bool line_break = keep_line_breaks && (ch == '\n' || ch == '\t');
    if ((ch < 0x20 && !line_break) || ch == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

void info(const std::string& message) { emit("", message); }
void warn(const std::string& message) { emit("warning: ", message); }
void error(const std::string& message) { emit("error: ", message); }

void status(const std::string& line, bool redraw) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (redraw) {
    std::fprintf(stderr, "\r\033[K%s%s", g_prefix.c_str(), line.c_str());
    g_status_open = true;
  } else {
    if (g_status_open) std::fputc('\n', stderr);
    g_status_open = false;
    std::fprintf(stderr, "%s%s\n", g_prefix.c_str(), line.c_str());
    to_tee(g_prefix + line);
  }
  std::fflush(stderr);
}

void set_rank(int rank, int world) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = world > 1 ? "[rank " + std::to_string(rank) + "] " : "";
}

bool tee(const std::string& path) {
  std::FILE* file = path.empty() ? nullptr : std::fopen(path.c_str(), "ae");  // e: not inherited by children
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_tee) std::fclose(g_tee);
  g_tee = file;
  return path.empty() || file != nullptr;
}

}  // namespace pinfeed::log

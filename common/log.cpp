#include "common/log.h"

#include <cstdio>
#include <mutex>

namespace pinfeed::log {
namespace {

std::mutex g_mutex;
bool g_status_open = false;  // a redrawn status line is on screen without its newline
std::string g_prefix;        // "[rank R] " in a data-parallel run

void emit(const char* prefix, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_status_open) {
    std::fputc('\n', stderr);
    g_status_open = false;
  }
  std::fprintf(stderr, "%s%s%s\n", g_prefix.c_str(), prefix, message.c_str());
  std::fflush(stderr);
}

}  // namespace

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
  }
  std::fflush(stderr);
}

void set_rank(int rank, int world) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = world > 1 ? "[rank " + std::to_string(rank) + "] " : "";
}

}  // namespace pinfeed::log

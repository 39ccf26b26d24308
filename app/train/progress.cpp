#include "app/train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <sstream>

#include "common/log.h"

namespace pinfeed::app {
namespace {
const auto kProcessStart = std::chrono::steady_clock::now();  // static initialisation: before main
}  // namespace

Progress::Progress(double interval_s) : tty_(::isatty(STDERR_FILENO)), interval_(tty_ ? 0.5 : interval_s) {}

bool Progress::due() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count() >= interval_;
}

void Progress::show(const std::string& line) {
  log::status(line, tty_);
  last_ = std::chrono::steady_clock::now();
}

void Progress::step_done() {
  if (started_) return;
  started_ = true;
  std::ostringstream s;
  s.precision(3);
  s << "start-up took " << std::chrono::duration<double>(std::chrono::steady_clock::now() - kProcessStart).count()
    << " s, from the process's start to the end of its first training step (data scan, model, cuDNN's plans, the "
       "CUDA graph's capture)";
  log::info(s.str());
}

void Progress::end() {
  if (tty_) log::status("", false);
}

std::string eta_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t s = static_cast<int64_t>(seconds);
  std::ostringstream o;
  if (s >= 3600) o << s / 3600 << "h";
  o << (s % 3600) / 60 << "m" << s % 60 << "s";
  return o.str();
}

}  // namespace pinfeed::app

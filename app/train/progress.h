// The progress line (redrawn on a terminal, printed every few seconds otherwise) and its ETA.
#pragma once

#include <chrono>
#include <string>

namespace pinfeed::app {

class Progress {
 public:
  explicit Progress(double interval_s);
  bool due() const;
  void show(const std::string& line);
  void end();  // a redrawn line gets its newline

 private:
  bool tty_;
  double interval_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::string eta_text(double seconds);  // "1h2m3s"; "--" when unknown

}  // namespace pinfeed::app

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
  // After a training step: the first time, one line saying how long the process took to get there.
  void step_done();

 private:
  bool tty_;
  bool started_ = false;
  double interval_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::string eta_text(double seconds);  // "1h2m3s"; "--" when unknown

}  // namespace pinfeed::app

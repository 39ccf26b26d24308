// Minimal thread-safe logging to stderr: one line per call, never interleaved between threads.
#pragma once

#include <string>

namespace pinfeed::log {

void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

// A progress line that redraws in place on a terminal: the next info/warn/error first ends it.
void status(const std::string& line, bool redraw);

// In a data-parallel run every line starts with "[rank R] ", so a line names the process that wrote it.
void set_rank(int rank, int world);

}  // namespace pinfeed::log

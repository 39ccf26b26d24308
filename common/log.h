// Minimal thread-safe logging to stderr: one line per call, never interleaved between threads. A run also keeps
// what it printed in its folder (tee): run.log.
#pragma once

#include <string>

namespace pinfeed::log {

void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

// `text` with control characters shown as \xNN (newline and tab kept with keep_line_breaks): paths and values a
// user typed, quoted in a message, must not drive the terminal. Every line printed here goes through it.
std::string printable(const std::string& text, bool keep_line_breaks = false);

// A progress line that redraws in place on a terminal: the next info/warn/error first ends it.
void status(const std::string& line, bool redraw);

// In a data-parallel run every line starts with "[rank R] ", so a line names the process that wrote it.
void set_rank(int rank, int world);

// From now on every line printed is also appended to `path`, each prefixed with the local date and time, until
// the next tee() ("" stops). A progress line redrawn in place on a terminal is left out of the file (the epoch's
// line says the same); one printed as a line of its own is kept. Returns false when the file cannot be opened.
// A line that cannot be written to the file is dropped from the file alone: the run goes on, its outputs are
// what fails loudly on a full disk.
bool tee(const std::string& path);

}  // namespace pinfeed::log

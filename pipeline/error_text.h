// An exception's message as one line for the log: LibTorch's errors (c10::Error) without the stack frames their
// what() carries, which would print a dozen "frame #" lines in the middle of a run's output.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace pinfeed {

inline std::string error_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace pinfeed

// What the engine refuses of its inputs: each is the user's to fix, exit 2 at the command line (app/main.cpp) and
// ValueError in Python. A damaged file is data::DataError (exit 3); a failed write is OutputError (engine/files.h).
#pragma once

#include <stdexcept>

namespace pinfeed::engine {

// The base of both: the user's input, not the program, is at fault.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file that is not a checkpoint or state dict pinfeed can read: missing, a directory, too large, another kind
// of pickle. what() starts with the path.
class CheckpointError : public InputError {
 public:
  using InputError::InputError;
};

// The ranks' setting is wrong: torchrun's variables partial or malformed, or a rank's config differs from rank 0's.
class RankSetupError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace pinfeed::engine

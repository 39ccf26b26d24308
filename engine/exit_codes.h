#pragma once

namespace pinfeed::engine {

// Exit codes of the pinfeed executable (README: "Exit codes").
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,      // an unexpected internal error
  kExitUsage = 2,        // bad command line, config file or option combination
  kExitData = 3,         // missing dataset, unreadable or corrupt image under on_bad_image = "fail"
  kExitOutput = 4,       // cannot write the run directory (disk full, permissions)
  kExitPeerFailed = 5,   // data-parallel run: another rank failed first (its error is named)
  kExitDiverged = 6,     // the weights stopped being finite: stopped before any checkpoint could take them
  kExitInterrupted = 130,  // SIGINT/SIGTERM: stopped after saving a checkpoint (during start-up, or a second
                           // signal: at once, nothing saved)
};

}  // namespace pinfeed::engine

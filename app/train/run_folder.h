// Rank 0's hold on the run folder it writes: the folder's lock, its run.log, and the leftovers of abandoned runs.
#pragma once

#include <string>

#include "app/run/run_lock.h"

namespace pinfeed::app {

// Takes `dir`'s lock, held until the RunLock goes: a second pinfeed on the same folder stops at once (exit 2)
// instead of writing the same files. Then appends the log to dir/run.log (OutputError if it cannot) and removes
// the temp files of writes cut short in the runs under runs_dir (run.dir) that no process holds.
RunLock own_run_folder(const std::string& dir, const std::string& runs_dir);

// The run folder a checkpoint path lies in ("." for a bare file name).
std::string run_dir_of(const std::string& checkpoint);

}  // namespace pinfeed::app

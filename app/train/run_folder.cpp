// own_run_folder and run_dir_of: the run folder pinfeed train writes, from a new run or a checkpoint's path.
#include "app/train/run_folder.h"

#include <filesystem>

#include "app/run/run_files.h"
#include "common/log.h"

namespace pinfeed::app {

RunLock own_run_folder(const std::string& dir, const std::string& runs_dir) {
  RunLock lock(dir);
  if (!log::tee((std::filesystem::path(dir) / "run.log").string())) {
    throw engine::OutputError("cannot open " + (std::filesystem::path(dir) / "run.log").string() + " for appending");
  }
  // The temp files of writes cut short in runs nobody holds (a first checkpoint killed mid-write leaves a
  // folder that can never be resumed, so its own resume would never clean it).
  for (const std::string& removed : remove_abandoned_temp_files(runs_dir)) {
    log::warn("removed " + removed + ": the temp file of a write cut short (kill -9, power loss) in a run no "
              "process holds");
  }
  return lock;
}

std::string run_dir_of(const std::string& checkpoint) {
  const std::string dir = std::filesystem::path(checkpoint).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace pinfeed::app

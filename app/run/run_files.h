// The run folder: its name, where it is, and the newest one of a run name.
#pragma once

#include <string>

#include "engine/files.h"

namespace pinfeed::app {

// runs/<YYYYmmdd-HHMMSS>-<name>, created (-2, -3, ... appended when that folder exists); throws OutputError.
std::string make_run_dir(const std::string& dir, const std::string& name);
// The run.name a run folder was started with: run.json's "name", else (a folder of an older pinfeed) the
// [run] name of its config.toml; "" when neither says.
std::string run_name_of(const std::string& run_dir);
// The newest run folder under dir started with run.name exactly `name` that holds last.pt or best.pt, or "". Newest: by
// the time stamp that starts the folder's name, then its -2, -3 suffix.
std::string find_last_run(const std::string& dir, const std::string& name);

}  // namespace pinfeed::app

// run.json: what a run folder's results came from. One record per start of the run (the first, then each
// resume), never replaced: the pinfeed version and git commit, the command line, host, time, rank 0's GPU, driver,
// LibTorch/CUDA/cuDNN versions, world size, device, and the config file that start resolved. Its presence also
// marks a folder as a pinfeed run folder (is_run_folder).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace pinfeed::app {

// What the trainer knows of this start that the process cannot tell by itself.
struct RunStart {
  std::string device = "cpu";  // the plan's device of rank 0, e.g. "cuda:0"
  int64_t world_size = 1;
  std::string checkpoint;      // a resume: the checkpoint it continues from
  int64_t resume_epoch = 0;    // a resume: the epoch it continues in, from 1
  int64_t resume_step = 0;     // a resume: steps of that epoch already trained
};

// This process's start record: the fields above plus what the process and the build say (see the file's top).
// config_file: the name of the config this start wrote in the folder.
nlohmann::json start_record(const RunStart& start, const std::string& config_file);
// The NVIDIA driver's version in the text of /proc/driver/nvidia/version ("580.159.04"); "" if none is there.
std::string nvidia_driver_version(const std::string& proc_text);

// Appends `record` to dir/run.json's "starts" (creating it with the run's name), atomically. A run.json that does
// not parse (damaged by hand) is kept as run.json.damaged-N rather than lost. Throws OutputError.
void append_start_record(const std::string& dir, const std::string& run_name, const nlohmann::json& record);

// A folder pinfeed wrote a run in: its run.json (an object with a "starts" list), or (an older pinfeed, or a
// damaged run.json) a config.toml pinfeed parses beside a metrics.jsonl or metrics.csv that starts as pinfeed's.
// Names alone do not make one: a user's folder holding files of those names is not written into.
bool is_run_folder(const std::string& dir);

}  // namespace pinfeed::app

// Between a run and its checkpoint file: what the step runner's state becomes in a Checkpoint and back, and
// which file `--resume` means.
#pragma once

#include <cstdint>
#include <string>

#include "app/checkpoint.h"
#include "app/config.h"
#include "app/step_runner.h"

namespace pinfeed::app {

Checkpoint make_checkpoint(StepRunner& runner, const Config& config, int64_t epoch, int64_t step_in_epoch,
                           int64_t global_step, int64_t world_size);
void restore_checkpoint(StepRunner& runner, const Checkpoint& checkpoint);  // weights, momentum, CPU RNG
// "last" -> the newest run named run.name that holds a last.pt; anything else is a path. Throws ConfigError.
std::string resume_path(const Config& config, const std::string& resume);

}  // namespace pinfeed::app

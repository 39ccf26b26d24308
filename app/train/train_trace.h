// run.trace_steps in pinfeed train: the range checked against the run's epochs, and rank 0's trace file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "app/plan/plan.h"
#include "app/run/run_outputs.h"
#include "engine/step/step_trace.h"

namespace pinfeed::app {

// The range must lie inside one epoch (an evaluation between two would be traced too) and inside the run;
// throws ConfigError naming where run.trace_steps was set.
void check_trace_steps(const Plan& plan, const engine::StepRange& s, int64_t steps_per_epoch);

// Rank 0 alone: its GPU's kernels, in the run folder it writes (mode: the training feeder's). first_step: the
// global step the run starts at; a resume past the range traces nothing, and says so.
std::unique_ptr<engine::StepTrace> open_train_trace(const Plan& plan, RunOutputs& out, const std::string& mode,
                                            int64_t first_step);

}  // namespace pinfeed::app

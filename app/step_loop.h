// The one step loop. `pinfeed train` runs it once per epoch, `pinfeed bench` once per row and repeat: hold the
// host back when it is too far ahead of the GPU, take a batch from the source, step, time, repeat. Only the
// source (feeder, resident batch, loader alone) and the step differ between them.
#pragma once

#include <cstdint>
#include <functional>

#include "pipeline/batch_source.h"
#include "pipeline/step_meter.h"

namespace pinfeed::app {

struct StepLoopOptions {
  int64_t epoch = 0;
  int64_t first_step = 0;    // within the epoch: where a resumed run continues
  int64_t end_step = 0;      // stop before this step
  int64_t warmup_steps = 0;  // leading steps left out of the figures
  int max_steps_ahead = 2;   // pipeline.max_steps_ahead
  bool wrap = false;         // when the source's epoch ends, start its next one (bench); else stop (train)
};

struct StepLoopResult {
  int64_t next_step = 0;  // the first step not run
  int64_t epoch = 0;      // the source's epoch at the end (later than options.epoch after a wrap)
  pipeline::EpochTiming timing;
};

// step(batch, index): the work on one batch. after(batch, index): bookkeeping once the step is issued and
// timed (outputs, progress); may be empty. Stops early on g_stop_requested.
using StepFn = std::function<void(const pipeline::DeviceBatch& batch, int64_t index)>;
StepLoopResult run_steps(pipeline::BatchSource& source, pipeline::StepMeter& meter, const StepLoopOptions& options,
                         const StepFn& step, const StepFn& after = {});

}  // namespace pinfeed::app

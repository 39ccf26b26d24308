// The one step loop. `pinfeed train` runs it once per epoch, `pinfeed bench` once per row and repeat: hold the
// host back when it is too far ahead of the GPU, take a batch from the source, step, time, repeat. Only the
// source (feeder, resident batch, loader alone) and the step differ between them.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/dist/distributed.h"
#include "pipeline/transfer/batch_source.h"
#include "pipeline/timing/step_meter.h"

namespace pinfeed::engine {

class StepTrace;
class StopRequest;

struct StepLoopOptions {
  int64_t epoch = 0;
  int64_t first_step = 0;    // within the epoch: where a resumed run continues
  int64_t end_step = 0;      // stop before this step
  int64_t warmup_steps = 0;  // leading steps left out of the figures
  int max_steps_ahead = 2;   // pipeline.max_steps_ahead
  bool wrap = false;         // when the source's epoch ends, start its next one (bench); else stop (train)
  // Ctrl-C / SIGTERM (signals.h), looked at before each step; null: the loop runs to end_step. Several ranks:
  // a stop is acted on at the same step on every rank (a vote every 10 steps), else a rank would wait in an
  // all-reduce that the others never join.
  const StopRequest* stop = nullptr;
  // A stop acts only a multiple of this many steps after first_step: between gradient accumulation's optimizer
  // steps (train.accumulate_steps), never inside one.
  int64_t stop_every = 1;
  Distributed* dist = nullptr;
  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> stream;  // the compute stream (CUDA)
  // A trace of some steps (engine/step/step_trace.h), or null. Its step numbers are trace_offset + the loop's step
  // (train: epoch x steps per epoch, a global step; bench: -warmup, so that 0 is the first timed step).
  StepTrace* trace = nullptr;
  int64_t trace_offset = 0;
};

struct StepLoopResult {
  int64_t next_step = 0;  // the first step not run
  int64_t epoch = 0;      // the source's epoch at the end (later than options.epoch after a wrap)
  pipeline::EpochTiming timing;
  bool stopped = false;  // options.stop requested (agreed by every rank)
};

// step(batch, index): the work on one batch. after(batch, index): bookkeeping once the step is issued and
// timed (outputs, progress); may be empty. Stops early once options.stop is requested. The training thread's time is in
// three profiler ranges, pinfeed::ahead (hold_back), pinfeed::wait (the source's next batch) and pinfeed::step,
// which a trace records; without one they cost a thread-local check each.
using StepFn = std::function<void(const pipeline::DeviceBatch& batch, int64_t index)>;
StepLoopResult run_steps(pipeline::BatchSource& source, pipeline::StepMeter& meter, const StepLoopOptions& options,
                         const StepFn& step, const StepFn& after = {});

}  // namespace pinfeed::engine

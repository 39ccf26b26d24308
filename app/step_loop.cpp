#include "app/step_loop.h"

#include "app/signals.h"

namespace pinfeed::app {

StepLoopResult run_steps(pipeline::BatchSource& source, pipeline::StepMeter& meter, const StepLoopOptions& o,
                         const StepFn& step, const StepFn& after) {
  StepLoopResult r;
  r.epoch = o.epoch;
  r.next_step = o.first_step;
  meter.start_epoch(o.warmup_steps);
  source.start_epoch(o.epoch, o.first_step);
  while (r.next_step < o.end_step && !g_stop_requested) {
    meter.hold_back(o.max_steps_ahead);
    auto batch = source.next();
    if (!batch && o.wrap) {
      source.start_epoch(++r.epoch);
      batch = source.next();
    }
    if (!batch) break;
    meter.begin_step();
    step(*batch, r.next_step);
    meter.end_step(batch->size, batch->timing);
    if (after) after(*batch, r.next_step);
    ++r.next_step;
  }
  r.timing = meter.finish_epoch();
  return r;
}

}  // namespace pinfeed::app

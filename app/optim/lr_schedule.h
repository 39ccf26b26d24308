// The learning rate at a global step: linear warm-up to lr, then cosine down to min_lr.
#pragma once

#include <cstdint>

namespace pinfeed::app {

// The schedule a run follows, resolved from train.* by resolve_plan (Plan::schedule): lr and min_lr as the run
// uses them, train.lr_reference_batch's scaling applied.
struct LrSchedule {
  double lr = 0.1;           // peak, reached at the end of the warm-up
  double min_lr = 0;         // at the end of the last epoch
  double warmup_epochs = 0;  // may be fractional
  int64_t epochs = 90;
};

double learning_rate(const LrSchedule& schedule, int64_t step, int64_t steps_per_epoch);

}  // namespace pinfeed::app

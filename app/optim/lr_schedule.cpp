#include "app/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace pinfeed::app {

double learning_rate(const LrSchedule& t, int64_t step, int64_t steps_per_epoch) {
  const double warmup = t.warmup_epochs * steps_per_epoch;
  const double total = static_cast<double>(t.epochs) * steps_per_epoch;
  const double lr = t.lr * t.batch_scale, min_lr = t.min_lr * t.batch_scale;
  if (step < warmup) return lr * (step + 1) / warmup;
  const double progress = total > warmup ? (step - warmup) / (total - warmup) : 1.0;
  return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

}  // namespace pinfeed::app

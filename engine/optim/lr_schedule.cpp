#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace pinfeed::engine {

namespace {

// FFCV's get_cyclic_lr: np.interp(epoch, [0, peak, epochs], [1e-4 lr, lr, min_lr]).
double triangle_at_epoch(const LrSchedule& t, double epoch, double lr, double min_lr) {
  const double peak = t.warmup_epochs, end = static_cast<double>(t.epochs);
  if (epoch >= end) return min_lr;
  if (epoch < peak) return 1e-4 * lr + (lr - 1e-4 * lr) * std::max(0.0, epoch) / peak;
  return lr + (min_lr - lr) * (epoch - peak) / (end - peak);
}

}  // namespace

double learning_rate(const LrSchedule& t, int64_t step, int64_t steps_per_epoch) {
  if (t.shape == LrShape::kTriangular) {
    // FFCV's train_loop: each epoch interpolates linearly between its own and the next epoch's rate, by step.
    const double lr = t.lr * t.batch_scale, min_lr = t.min_lr * t.batch_scale;
    const int64_t epoch = step / steps_per_epoch, at = step % steps_per_epoch;
    const double a = triangle_at_epoch(t, static_cast<double>(epoch), lr, min_lr);
    const double b = triangle_at_epoch(t, static_cast<double>(epoch + 1), lr, min_lr);
    return a + (b - a) * static_cast<double>(at) / static_cast<double>(steps_per_epoch);
  }
  const double warmup = t.warmup_epochs * steps_per_epoch;
  const double total = static_cast<double>(t.epochs) * steps_per_epoch;
  const double lr = t.lr * t.batch_scale, min_lr = t.min_lr * t.batch_scale;
  if (t.shape == LrShape::kPoly) {
    // NVIDIA's MLPerf PolySchedule, whose iterations count from 1: lr it / warmup up to the warm-up's last step,
    // then min_lr + (lr - min_lr) (1 - (it - warmup) / (total - warmup))^power.
    const double it = static_cast<double>(step + 1);
    if (it <= warmup) return lr * it / warmup;
    const double progress = total > warmup ? std::min(1.0, (it - warmup) / (total - warmup)) : 1.0;
    return min_lr + (lr - min_lr) * std::pow(1 - progress, t.poly_power);
  }
  if (step < warmup) return lr * (step + 1) / warmup;
  const double progress = total > warmup ? (step - warmup) / (total - warmup) : 1.0;
  return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

}  // namespace pinfeed::engine

// The learning rate at a global step: linear warm-up to lr, then cosine or polynomial down to min_lr; or FFCV's
// triangle.
#pragma once

#include <cstdint>

namespace pinfeed::engine {

// The schedule a run follows (train.*). lr and min_lr are per reference_batch samples when it is set: the run
// uses them times batch_scale (global batch / reference_batch, set by resolve_plan; Goyal et al. 2017).
enum class LrShape {
  kCosine,      // warm-up from lr / steps to lr, then cosine to min_lr (Goyal et al. 2017, Loshchilov & Hutter)
  kTriangular,  // FFCV's `cyclic`: 1e-4 lr at epoch 0, linear up to lr at warmup_epochs, linear down to min_lr
  kPoly,        // MLPerf's ResNet-50 LARS schedule: warm-up from lr / steps to lr, then
                // min_lr + (lr - min_lr) (1 - progress)^poly_power, min_lr at the last step
};

struct LrSchedule {
  LrShape shape = LrShape::kCosine;
  double lr = 0.1;              // peak, reached at the end of the warm-up
  double min_lr = 0;            // at the end of the last epoch
  double warmup_epochs = 0;     // may be fractional
  double poly_power = 2;        // kPoly's exponent (MLPerf's: 2)
  int64_t epochs = 90;
  int64_t reference_batch = 0;  // 0: lr and min_lr as given
  double batch_scale = 1;
  double peak_lr() const { return lr * batch_scale; }
};

double learning_rate(const LrSchedule& schedule, int64_t step, int64_t steps_per_epoch);

}  // namespace pinfeed::engine

// The learning rate at a global step: linear warm-up to train.lr, then cosine down to train.min_lr.
#pragma once

#include <cstdint>

#include "app/config.h"

namespace pinfeed::app {

double learning_rate(const TrainConfig& train, int64_t step, int64_t steps_per_epoch);

}  // namespace pinfeed::app

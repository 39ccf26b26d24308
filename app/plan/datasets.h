// The train and val datasets of a plan: the ImageFolder scanned, with the plan's transform and bad-image policy.
#pragma once

#include <cstdint>
#include <memory>

#include "app/plan/plan.h"
#include "data/dataset/dataset.h"

namespace pinfeed::app {

struct Datasets {
  std::shared_ptr<data::Dataset> train, val;  // val null when not asked for
  int64_t num_classes = 0;
};

// Throws DataError for a missing or empty folder, ConfigError when model.num_classes is below the folders' count, or
// above it without model.allow_extra_classes.
Datasets open_datasets(const Plan& plan, bool with_val);

}  // namespace pinfeed::app

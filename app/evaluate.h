// Validation: mean loss, top-1 and top-5 over the whole val split, summed on the device.
#pragma once

#include <cmath>

#include "app/distributed.h"
#include "app/step_runner.h"
#include "pipeline/batch_source.h"

namespace pinfeed::app {

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
  int64_t samples = 0;  // over every rank
};

// Several ranks: each evaluates its shard (every sample exactly once across ranks) and the sums are
// all-reduced, so every rank returns the whole split's figures.
EvalResult evaluate(StepRunner& runner, pipeline::BatchSource& source, Distributed* dist = nullptr);

}  // namespace pinfeed::app

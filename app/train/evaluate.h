// Validation: mean loss, top-1 and top-5 over the whole val split, summed on the device.
#pragma once

#include <cmath>

#include "app/dist/distributed.h"
#include "app/run/signals.h"
#include "app/step/step_runner.h"
#include "pipeline/transfer/batch_source.h"

namespace pinfeed::app {

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
  int64_t samples = 0;  // over every rank
};

// Several ranks: each evaluates its shard (every sample exactly once across ranks) and the sums are
// all-reduced, so every rank returns the whole split's figures. stop (may be null): once requested, the
// remaining batches are left out.
EvalResult evaluate(StepRunner& runner, pipeline::BatchSource& source, Distributed* dist = nullptr,
                    const StopRequest* stop = nullptr);

}  // namespace pinfeed::app

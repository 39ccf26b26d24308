// Validation: mean loss, top-1 and top-5 over the whole val split, summed on the device.
#pragma once

#include <cmath>

#include "app/step_runner.h"
#include "pipeline/batch_source.h"

namespace pinfeed::app {

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
};

EvalResult evaluate(StepRunner& runner, pipeline::BatchSource& source);

}  // namespace pinfeed::app

// Validation: mean loss, top-1 and top-5 over the whole val split, summed on the device.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/dist/distributed.h"
#include "engine/signals.h"
#include "engine/step/step_runner.h"
#include "pipeline/transfer/batch_source.h"

namespace pinfeed::app {

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
  int64_t samples = 0;  // over every rank
};

// Several ranks: each evaluates its shard (every sample exactly once across ranks) and the sums are
// all-reduced, so every rank returns the whole split's figures. stop (may be null): once requested, the
// remaining batches are left out. ema: the EMA's weights (train.ema) instead of the model's.
// Which weights of an epoch become best.pt: of the raw weights' and the EMA's (train.ema; NaN otherwise)
// evaluations that covered all `samples` (a stop may cut one short), the higher top-1 (the EMA's only when
// strictly higher), when it beats best_so_far (NaN: none yet). weights "" when neither does.
struct BestWeights {
  std::string weights;  // "raw" | "ema" | ""
  double top1 = NAN;
};
BestWeights best_weights(const EvalResult& raw, const EvalResult& ema, int64_t samples, double best_so_far);

// on_batch (may be empty): after each batch, this rank's batches and samples so far (pinfeed eval's progress line).
using EvalProgress = std::function<void(int64_t batches, int64_t samples)>;
EvalResult evaluate(engine::StepRunner& runner, pipeline::BatchSource& source, engine::Distributed* dist = nullptr,
                    const engine::StopRequest* stop = nullptr, bool ema = false, const EvalProgress& on_batch = {});

}  // namespace pinfeed::app

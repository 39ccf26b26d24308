#include "app/train/evaluate.h"

#include <ATen/ops/zeros.h>

namespace pinfeed::app {

BestWeights best_weights(const EvalResult& raw, const EvalResult& ema, int64_t samples, double best_so_far) {
  const auto whole = [&](const EvalResult& r) { return r.samples == samples && !std::isnan(r.top1); };
  BestWeights b;
  if (whole(raw)) b = {"raw", raw.top1};
  if (whole(ema) && (b.weights.empty() || ema.top1 > b.top1)) b = {"ema", ema.top1};
  if (b.weights.empty() || b.top1 <= best_so_far) return {};  // a NaN best_so_far compares false: any is better
  return b;
}

EvalResult evaluate(engine::StepRunner& runner, pipeline::BatchSource& source, engine::Distributed* dist, const engine::StopRequest* stop,
                    bool ema, const EvalProgress& on_batch) {
  runner.model()->eval();
  at::Tensor sums = at::zeros({4}, at::TensorOptions().device(runner.device()).dtype(at::kDouble));
  source.start_epoch(0);
  int64_t batches = 0, samples = 0;
  while (auto b = source.next()) {
    runner.eval_step(b->images, b->labels, sums, ema);
    if (on_batch) on_batch(++batches, samples += b->size);
    if (stop && stop->requested()) break;
  }
  runner.model()->train();
  if (dist) dist->all_reduce_sum(sums);
  const at::Tensor s = sums.cpu();
  const double n = s[3].item<double>();
  if (n == 0) return {};
  return {s[0].item<double>() / n, s[1].item<double>() / n, s[2].item<double>() / n, static_cast<int64_t>(n)};
}

}  // namespace pinfeed::app

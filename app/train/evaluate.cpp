#include "app/train/evaluate.h"

#include <ATen/ops/zeros.h>

namespace pinfeed::app {

EvalResult evaluate(StepRunner& runner, pipeline::BatchSource& source, Distributed* dist, const StopRequest* stop) {
  runner.model()->eval();
  at::Tensor sums = at::zeros({4}, at::TensorOptions().device(runner.device()).dtype(at::kDouble));
  source.start_epoch(0);
  while (auto b = source.next()) {
    runner.eval_step(b->images, b->labels, sums);
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

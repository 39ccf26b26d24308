// `pinfeed train`: the whole run, from its run folder through the epochs to the last checkpoint.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/plan/plan.h"
#include "engine/signals.h"

namespace pinfeed::app {

// The weights stopped being finite (a learning rate too high, a loss gone to NaN): the run stops before any
// checkpoint could take them, so last.pt and best.pt keep the last good state. Exit code 6.
class Diverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainArgs {
  std::string resume;  // "", a checkpoint path, or "last"
  int64_t stop_after_steps = 0;  // > 0: behave as if Ctrl-C came after this many steps of this process (tests)
};

struct EpochResult {
  int64_t epoch = 0;
  double train_loss = 0, val_loss = 0, val_top1 = 0, val_top5 = 0;
  double samples_per_s = 0, epoch_seconds = 0;
  int image_size = 0;  // the epoch's training side (data.image_size, or its schedule's)
  double eval_seconds = NAN;  // part of epoch_seconds
  double ema_val_loss = NAN, ema_val_top1 = NAN, ema_val_top5 = NAN;  // train.ema: the EMA's weights evaluated
  std::string best_weights;  // "raw" or "ema" when this epoch's evaluation is the best so far (best.pt), else ""
};

struct TrainResult {
  std::string run_dir;
  std::vector<EpochResult> epochs;
  bool interrupted = false;
  bool main_rank = true;  // rank 0 (or a single process): the one that reports
};

// Runs the whole training; once `stop` is requested (main hands it signal_stop(), signals.h), saves a checkpoint
// at the end of the step and returns, interrupted. Throws ConfigError, DataError, OutputError.
TrainResult train(const Plan& plan, const TrainArgs& args, engine::StopRequest& stop);

}  // namespace pinfeed::app

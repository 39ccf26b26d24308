// What pinfeed train says about its run: the opening line, the progress line, and each epoch's row and line.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/dist/distributed.h"
#include "app/plan/datasets.h"
#include "app/plan/plan.h"
#include "app/run/run_outputs.h"
#include "engine/step/step_runner.h"
#include "app/train/trainer.h"
#include "pipeline/transfer/feeder.h"

namespace pinfeed::app {

// What one epoch of training left behind for its report.
struct EpochProgress {
  int64_t step = 0;
  int64_t bad_images = 0;  // distinct bad files of the training set found so far by any rank, resumes included
  double lr = 0;
  bool stopped = false;
  pipeline::EpochTiming timing;
  // fp16: the loss scale at the epoch's end, and the steps of the epoch skipped for overflowed gradients.
  double loss_scale = NAN;
  int64_t skipped_steps = 0;
  std::optional<engine::StepRunner::CaptureCost> captured;  // train.cuda_graph: graphs for batch shapes new this epoch
};

// Every rank's figures of the epoch, for rank 0's row: world size, global samples/s and the spread between
// ranks (a straggler shows as a wide min-max).
struct RankSpread {
  int64_t world = 1;
  double global_samples_per_s = NAN;
  double samples_per_s_min = NAN, samples_per_s_max = NAN, wait_min = NAN, wait_max = NAN;
  double idle_min = NAN, idle_max = NAN;
};
RankSpread spread(engine::Distributed& dist, const pipeline::EpochTiming& t);  // every rank calls it

// The run's first line: its folder, data, device, pipeline, step options and ranks.
void announce_run(const std::string& run_dir, const Plan& plan, const Datasets& sets, const pipeline::Feeder& feed,
                  int64_t steps_per_epoch, bool graphed, const engine::Distributed& dist);

// "epoch 2/90 step 100/5004 | ... | ETA ...": rate in samples/s (NaN in the epoch's warm-up steps: "warming up",
// no ETA), loss the latest step's.
std::string progress_line(const Plan& plan, int64_t epoch, const EpochProgress& p, int64_t steps_per_epoch,
                          double rate, double loss);

// Rank 0, after the last epoch: one `final:` line (stderr and run.log) with the last epoch's figures, the best
// epoch and best.pt (from metrics.jsonl, so an earlier start of a resumed run counts too), the run folder and how
// long this start took (`resumed`: since the resume).
void report_end(const RunOutputs& out, const Plan& plan, const std::string& run_dir, const EpochResult& last,
                double seconds, bool resumed);

// Rank 0: the epoch's row of epochs.jsonl and its log line.
void report_epoch(RunOutputs& out, const Plan& plan, const pipeline::Feeder& feed, const EpochResult& er,
                  const EpochProgress& p, const RankSpread& ranks);

}  // namespace pinfeed::app

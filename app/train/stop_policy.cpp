// StopPolicy: the checkpoint each early stop writes, and the line it ends the run with.
#include "app/train/stop_policy.h"

namespace pinfeed::app {

StopSave StopPolicy::in_epoch(int64_t epoch, int64_t step, const std::string& last) const {
  // A checkpoint would only repeat the position this run started from (or, new, an untrained model).
  if (steps_here_ == 0) return {false, 0, 0, "interrupted before the first step: nothing saved"};
  return {true, epoch, step,
          "interrupted: saved " + last + " at epoch " + std::to_string(epoch + 1) + " step " + std::to_string(step) +
              "; continue with --resume " + last};
}

StopSave StopPolicy::after_epoch(int64_t epoch, bool saved, const std::string& last) const {
  // run.checkpoint_every > 1: the epoch is not lost.
  return {!saved, epoch + 1, 0,
          "interrupted: saved " + last + " at the end of epoch " + std::to_string(epoch + 1) +
              "; continue with --resume " + last};
}

StopSave StopPolicy::before_stuck_input(int64_t epoch, int64_t steps_run, int64_t pending, const std::string& why,
                                        const std::string& last) {
  steps_here_ += pending;
  if (dist_.active() || steps_here_ == 0) {  // at an epoch's first batch: its start is the position
    return {false, 0, 0, why + ": nothing saved at this step; the last checkpoint written is kept"};
  }
  return {true, epoch, steps_run,
          why + ": saved " + last + " at epoch " + std::to_string(epoch + 1) + " step " + std::to_string(steps_run) +
              "; once the file named below reads again (replaced in place: a resume refuses a changed image "
              "count), continue with --resume " + last};
}

}  // namespace pinfeed::app

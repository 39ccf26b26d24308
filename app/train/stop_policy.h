// When pinfeed train stops before its last epoch, and what it saves then: one policy for every early stop.
#pragma once

#include <cstdint>
#include <string>

#include "engine/dist/distributed.h"
#include "engine/signals.h"

namespace pinfeed::app {

// What a stop saves: last.pt at (epoch, step) when `write`, and the warning the run ends with.
struct StopSave {
  bool write = false;
  int64_t epoch = 0, step = 0;  // the checkpoint's position: epochs done, steps of the next one done
  std::string line;
};

// A run stops early at one of three points: inside an epoch (Ctrl-C, the input ended), at an epoch's end (a stop
// that came during the evaluation or the save), or where the input pipeline holds a batch back (a stuck sample,
// or Ctrl-C while waiting on one). `last`: last.pt's path on rank 0, which writes it ("" on the other ranks).
class StopPolicy {
 public:
  // stop_after_steps: TrainArgs::stop_after_steps.
  StopPolicy(engine::StopRequest& stop, engine::Distributed& dist, int64_t stop_after_steps)
      : stop_(stop), dist_(dist), stop_after_steps_(stop_after_steps) {}

  // After each step whose results came back: TrainArgs::stop_after_steps acts as Ctrl-C there.
  void step_done() {
    if (++steps_here_ == stop_after_steps_) stop_.request();
  }
  // Every rank asks at the same points and every rank gets the same answer, so all of them leave together.
  bool stop_in_epoch(bool input_stopped) { return dist_.any(input_stopped || stop_.requested()); }
  bool stop_after_epoch() { return dist_.any(stop_.requested()); }

  // Inside an epoch, after `step` of it: its position, mid-epoch; nothing before this process's first step.
  StopSave in_epoch(int64_t epoch, int64_t step, const std::string& last) const;
  // At the end of an epoch: its position, unless run.checkpoint_every just wrote it (`saved`).
  StopSave after_epoch(int64_t epoch, bool saved, const std::string& last) const;
  // The input pipeline holds a batch back after `steps_run` steps of the epoch were handed to the device, `pending`
  // of them not resolved yet (they count as run). The model is whole after them, so one process saves them as at
  // any stop; with several ranks the others sit in a collective this one will not join (the rank heartbeat names
  // it there) and the last checkpoint written is kept.
  StopSave before_stuck_input(int64_t epoch, int64_t steps_run, int64_t pending, const std::string& why,
                              const std::string& last);

 private:
  engine::StopRequest& stop_;
  engine::Distributed& dist_;
  int64_t stop_after_steps_ = 0;
  int64_t steps_here_ = 0;  // steps this process has run
};

}  // namespace pinfeed::app

// The epoch loop of `pinfeed train` (train an epoch, evaluate, report, save), for trainer.cpp, which starts or
// resumes the run around it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "app/plan/datasets.h"
#include "engine/checkpoint/checkpoint.h"
#include "app/run/run_outputs.h"
#include "app/train/trainer.h"

namespace pinfeed::engine {
class Distributed;
}  // namespace pinfeed::engine

namespace pinfeed::app {

class Training {
 public:
  Training(const Plan& plan, Datasets sets, engine::Distributed& dist, engine::StopRequest& stop, int64_t stop_after_steps);
  ~Training();
  // Restores a checkpoint (read by rank 0 alone: the others receive its state); returns where to continue:
  // (epoch, step in that epoch).
  std::pair<int64_t, int64_t> resume(const std::optional<engine::Checkpoint>& checkpoint);
  void init_from(const std::string& path);  // train.init_from: rank 0 reads the file; every rank starts from it
  // out: rank 0's outputs; null on the other ranks, which write nothing. Every way out waits for the checkpoint
  // being written; its error is the run's, as when checkpoints were written on this thread (exit code 4).
  void run(RunOutputs* out, int64_t start_epoch, int64_t start_step, TrainResult& result);
  void list_bad_images_found(RunOutputs& out) noexcept;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pinfeed::app

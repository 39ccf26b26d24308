// A training run's outputs in its folder: the resolved config.toml, metrics.csv and metrics.jsonl (a row per
// epoch, same columns), steps.jsonl (a row per step, with run.log_steps).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/run_files.h"
#include "pipeline/step_meter.h"

namespace pinfeed::app {

class RunOutputs {
 public:
  RunOutputs(const Config& config, const std::string& dir);
  std::string path(const std::string& name) const;
  void epoch(const nlohmann::json& row);  // every column of kCsvColumns; null = not applicable
  void steps(int64_t epoch, const std::vector<pipeline::StepRecord>& records);

  static constexpr const char* kCsvColumns[] = {
      "epoch", "lr", "train_loss", "val_loss", "val_top1", "val_top5", "samples_per_s", "epoch_s", "steps",
      "warmup_steps", "wait_ms_mean", "wait_ms_p50", "wait_ms_p95", "loader_ms_mean", "ahead_ms_mean", "h2d_ms_mean",
      "compute_ms_mean",
      "gpu_idle", "mode", "pinned_mb", "host_rss_mb", "workers", "bad_images", "world_size",
      "global_samples_per_s", "samples_per_s_min", "samples_per_s_max", "wait_ms_mean_min", "wait_ms_mean_max",
      "gpu_idle_min", "gpu_idle_max"};

 private:
  std::string dir_;
  AppendFile csv_, jsonl_, steps_;
};

// Resident host memory of this process, MiB (pinned buffers included), to show it does not grow.
double host_rss_mb();

}  // namespace pinfeed::app

// A training run's outputs in its folder: run.json (each start's record, run_record.h), the resolved config
// (config.toml of the first start, config.resume-N.toml of the N-th resume), metrics.jsonl and metrics.csv (a
// row per epoch, same columns), steps.jsonl (a row per step, with run.log_steps), bad_images.tsv (each bad image
// file once: path and reason). Epochs are numbered from 1 in every file (app/run/metrics.h). The folder's
// writer holds its RunLock (run_lock.h) while it makes one of these.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "app/run/run_files.h"
#include "app/run/run_record.h"
#include "data/dataset/dataset.h"
#include "engine/step/step_losses.h"
#include "pipeline/timing/step_meter.h"

namespace pinfeed::app {

// Where a resumed run continues (the checkpoint's position).
struct ResumePoint {
  int64_t epoch = 0;          // 0-based: the epoch to continue in
  int64_t step_in_epoch = 0;  // steps of it already trained
};

// What a run's outputs are written from, beside its folder.
struct RunOutputsOptions {
  std::string config_toml;  // the resolved config as text (to_toml): config.toml, or config.resume-N.toml
  std::string name;         // run.name, recorded in run.json
  bool log_steps = false;   // run.log_steps: steps.jsonl is written
};

class RunOutputs {
 public:
  // Removes the temp files pinfeed's writes left in dir first (is_pinfeed_temp_name; a user's *.tmp stays),
  // writes the resolved config (config.toml, or on a resume config.resume-N.toml beside it) and appends this
  // start to run.json. resumed: the outputs of a run continued from a checkpoint, which can be older than its
  // metrics (kill -9 after an epoch's row, before its checkpoint; checkpoint_every > 1; a resume from an older
  // copy): rows the checkpoint has not reached are dropped, so that the epochs run again are not listed twice,
  // and metrics.csv is rewritten from metrics.jsonl (see epoch()).
  RunOutputs(const RunOutputsOptions& options, const std::string& dir,
             const std::optional<ResumePoint>& resumed = std::nullopt, const RunStart& start = {});
  std::string path(const std::string& name) const;
  // Every metric of kEpochMetrics (app/run/metrics.h); null = not applicable. metrics.jsonl first, then metrics.csv: after a crash or
  // a full disk between the two, metrics.csv lacks a row that metrics.jsonl has, and a resume rebuilds it.
  void epoch(const nlohmann::json& row);
  // epoch: 0-based, as the loop counts; written from 1. Rows are not fsynced (a resume drops those past the
  // checkpoint anyway).
  void steps(int64_t epoch, const std::vector<engine::StepRow>& rows);
  const std::string& config_file() const { return config_file_; }  // the config this start wrote
  // Appends to bad_images.tsv the files not listed yet (a resumed run's datasets find them again).
  void bad_images(const std::vector<data::BadImage>& found);
  // The paths bad_images.tsv lists: those of an earlier part of a resumed run, then those added.
  const std::unordered_set<std::string>& bad_images_listed() const { return bad_listed_; }

 private:
  // legacy_steps: steps.jsonl of an older pinfeed (a folder without run.json), its epochs numbered from 0.
  void keep_rows_reached(const ResumePoint& at, bool legacy_steps);

  std::string dir_;
  std::string config_file_;
  engine::AppendFile csv_, jsonl_, steps_, bad_;
  std::unordered_set<std::string> bad_listed_;  // paths in bad_images.tsv (unescaped)
};

// A TSV field: backslash, tab, newline and carriage return written as \\, \t, \n, \r, so that a hostile file
// name or decoder message cannot add a column or a row.
std::string tsv_escape(const std::string& field);
std::string tsv_unescape(const std::string& field);  // tsv_escape undone

// Resident host memory of this process, MiB (pinned buffers included), to show it does not grow.
double host_rss_mb();

}  // namespace pinfeed::app

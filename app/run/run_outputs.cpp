#include "app/run/run_outputs.h"

#include "app/run/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/format.h"
#include "common/log.h"

namespace pinfeed::app {
namespace {

std::string csv_header() {
  std::string header;
  for (const Metric& m : kEpochMetrics) header += (header.empty() ? "" : ",") + std::string(m.name);
  return header;
}

// A row missing a column (a row of an older pinfeed, when a resume rebuilds the CSV) gets an empty field.
std::string csv_line(const nlohmann::json& row) {
  std::ostringstream line;
  bool first = true;
  for (const Metric& m : kEpochMetrics) {
    line << (first ? "" : ",");
    first = false;
    const auto it = row.find(m.name);
    if (it == row.end() || it->is_null()) continue;  // not applicable: an empty field, never a zero
    if (it->is_string()) line << it->get<std::string>();
    else line << it->dump();
  }
  return line.str();
}

std::string read_text(const std::string& path) {
  if (!std::filesystem::exists(path)) return {};
  const std::vector<char> bytes = engine::read_file_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

// The lines of a JSON-lines file that parse as objects with integer `keys`, each with its parsed row; a torn or
// damaged line is left out.
std::vector<std::pair<std::string, nlohmann::json>> json_rows(const std::string& text,
                                                              std::initializer_list<const char*> keys) {
  std::vector<std::pair<std::string, nlohmann::json>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool whole = row.is_object();
    for (const char* key : keys) whole = whole && row.contains(key) && row[key].is_number_integer();
    if (whole) rows.emplace_back(std::move(line), std::move(row));
  }
  return rows;
}

void replace_if_changed(const std::string& path, const std::string& before, const std::string& after) {
  if (after != before) engine::write_file_atomic(path, after);
}

}  // namespace

RunOutputs::RunOutputs(const RunOutputsOptions& o, const std::string& dir, const std::optional<ResumePoint>& resumed,
                       const RunStart& start)
    : dir_(dir) {
  for (const std::string& name : engine::remove_stale_temp_files(dir)) {
    log::warn("removed " + path(name) + ": the temp file of a write cut short (kill -9, a second Ctrl-C, power loss)");
  }
  const bool legacy_steps = !std::filesystem::exists(path("run.json"));  // before this start writes it
  // config.toml stays the first start's: a resume may change keys (train.epochs, ...), and each start's config
  // is kept beside it, named in its run.json record.
  config_file_ = "config.toml";
  for (int n = 1; std::filesystem::exists(path(config_file_)); ++n) config_file_ = "config.resume-" + std::to_string(n) + ".toml";
  engine::write_file_atomic(path(config_file_), o.config_toml);
  append_start_record(dir, o.name, start_record(start, config_file_));
  if (resumed) keep_rows_reached(*resumed, legacy_steps);
  jsonl_ = engine::AppendFile(path("metrics.jsonl"));
  csv_ = engine::AppendFile(path("metrics.csv"));
  if (o.log_steps) steps_ = engine::AppendFile(path("steps.jsonl"));
  if (csv_.empty()) csv_.append(csv_header());
  std::istringstream listed(read_text(path("bad_images.tsv")));
  std::string line;
  for (std::getline(listed, line); std::getline(listed, line);) {
    bad_listed_.insert(tsv_unescape(line.substr(0, line.find('\t'))));
  }
  bad_ = engine::AppendFile(path("bad_images.tsv"));
  if (bad_.empty()) bad_.append("path\treason");
}

void RunOutputs::keep_rows_reached(const ResumePoint& at, bool legacy_steps) {
  // Epoch rows carry the 1-based number of the epoch they close: the checkpoint has reached rows 1..at.epoch.
  // The last row of an epoch wins, should an older pinfeed have written one twice.
  const std::string jsonl_before = read_text(path("metrics.jsonl"));
  std::map<int64_t, std::pair<std::string, nlohmann::json>> reached;
  size_t dropped = 0;
  for (auto& [line, row] : json_rows(jsonl_before, {"epoch"})) {
    const int64_t epoch = row["epoch"].get<int64_t>();
    if (epoch <= at.epoch) reached[epoch] = {std::move(line), std::move(row)};
    else ++dropped;
  }
  std::string jsonl, csv = csv_header() + "\n";
  for (const auto& [epoch, kept] : reached) {
    jsonl += kept.first + "\n";
    csv += csv_line(kept.second) + "\n";
  }
  replace_if_changed(path("metrics.jsonl"), jsonl_before, jsonl);
  if (!jsonl_before.empty() || std::filesystem::exists(path("metrics.csv"))) {
    replace_if_changed(path("metrics.csv"), read_text(path("metrics.csv")), csv);  // derived from metrics.jsonl
  }
  if (dropped) {
    log::warn("resume: dropped " + std::to_string(dropped) + " row(s) of epochs after epoch " +
              std::to_string(at.epoch) + " from metrics.jsonl and metrics.csv: the checkpoint is older than them, " +
              "those epochs run again");
  }

  // Step rows carry the 1-based epoch and the 0-based step in it: the checkpoint has reached those before
  // (at.epoch + 1, at.step). An older pinfeed numbered their epochs from 0: renumbered here, once.
  const std::string steps_before = read_text(path("steps.jsonl"));
  if (steps_before.empty()) return;
  std::string steps;
  for (auto& [line, row] : json_rows(steps_before, {"epoch", "step"})) {
    if (legacy_steps) row["epoch"] = row["epoch"].get<int64_t>() + 1;
    const int64_t epoch = row["epoch"].get<int64_t>() - 1, step = row["step"].get<int64_t>();
    if (epoch < at.epoch || (epoch == at.epoch && step < at.step_in_epoch)) steps += (legacy_steps ? row.dump() : line) + "\n";
  }
  replace_if_changed(path("steps.jsonl"), steps_before, steps);
}

std::string RunOutputs::path(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }

void RunOutputs::epoch(const nlohmann::json& row) {
  jsonl_.append(row.dump());
  csv_.append(csv_line(row));
}

void RunOutputs::steps(int64_t epoch, const std::vector<engine::StepRow>& rows) {
  if (!steps_.is_open()) return;
  for (const engine::StepRow& row : rows) {
    const pipeline::StepRecord& r = row.record;
    steps_.append(nlohmann::json{{"epoch", epoch + 1}, {"step", r.step}, {"loss", common::num_or_null(row.loss)},
                                 {"lr", common::num_or_null(row.lr)}, {"samples", r.samples}, {"warmup", r.warmup},
                                 {"wait_ms", r.wait_ms}, {"loader_ms", r.loader_ms}, {"ahead_ms", common::num_or_null(r.ahead_ms)},
                                 {"h2d_ms", common::num_or_null(r.h2d_ms)}, {"compute_ms", common::num_or_null(r.compute_ms)}}
                      .dump(),
                  /*sync=*/false);
  }
}

void RunOutputs::bad_images(const std::vector<data::BadImage>& found) {
  for (const data::BadImage& b : found) {
    if (bad_listed_.insert(b.path).second) bad_.append(tsv_escape(b.path) + "\t" + tsv_escape(b.reason));
  }
}

std::string tsv_escape(const std::string& field) {
  std::string out;
  out.reserve(field.size());
  for (const char ch : field) {
    switch (ch) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string tsv_unescape(const std::string& field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    switch (field[++i]) {
      case 't': out += '\t'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      default: out += field[i];  // '\\', and anything tsv_escape never writes, as it stands
    }
  }
  return out;
}

double host_rss_mb() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * sysconf(_SC_PAGESIZE) / (1 << 20);
}

}  // namespace pinfeed::app

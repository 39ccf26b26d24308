#include "app/run_outputs.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "app/format.h"

namespace pinfeed::app {

RunOutputs::RunOutputs(const Config& c, const std::string& dir) : dir_(dir) {
  write_file_atomic(path("config.toml"), to_toml(c));
  csv_ = AppendFile(path("metrics.csv"));
  jsonl_ = AppendFile(path("metrics.jsonl"));
  if (c.run.log_steps) steps_ = AppendFile(path("steps.jsonl"));
  if (csv_.empty()) {
    std::string header;
    for (const char* column : kCsvColumns) header += (header.empty() ? "" : ",") + std::string(column);
    csv_.append(header);
  }
}

std::string RunOutputs::path(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }

void RunOutputs::epoch(const nlohmann::json& row) {
  std::ostringstream line;
  bool first = true;
  for (const char* key : kCsvColumns) {
    line << (first ? "" : ",");
    first = false;
    const auto& v = row.at(key);
    if (v.is_null()) continue;  // not applicable: an empty field, never a zero
    if (v.is_string()) line << v.get<std::string>();
    else line << v.dump();
  }
  csv_.append(line.str());
  jsonl_.append(row.dump());
}

void RunOutputs::steps(int64_t epoch, const std::vector<pipeline::StepRecord>& records) {
  if (!steps_.is_open()) return;
  for (const auto& r : records) {
    steps_.append(nlohmann::json{{"epoch", epoch}, {"step", r.step}, {"samples", r.samples}, {"warmup", r.warmup},
                                 {"wait_ms", r.wait_ms}, {"loader_ms", r.loader_ms}, {"ahead_ms", num_or_null(r.ahead_ms)},
                                 {"h2d_ms", num_or_null(r.h2d_ms)}, {"compute_ms", num_or_null(r.compute_ms)}}
                      .dump(),
                  /*sync=*/false);
  }
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

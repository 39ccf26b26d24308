// What `pinfeed bench` writes: per row, every repeat's figures and their medians (bench.json, bench.csv) and a
// Markdown table beside the Python reference's rows (table.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace pinfeed::app {

// The framing rows' names in bench.json (the Python reference writes the same).
constexpr const char* kGpuResidentRow = "gpu_resident";
constexpr const char* kLoaderOnlyRow = "loader_only";

struct BenchSample {  // one repeat of one row
  double samples_per_s = NAN, wait_p50 = NAN, wait_mean = NAN, gpu_idle = NAN, h2d_mean = NAN;
  double loader_mean = NAN, ahead_mean = NAN;
  std::string mode_ran;
  std::vector<double> per_rank_samples_per_s;  // several ranks: each rank's samples/s (rank order)
  double total_samples_per_s = NAN;            // their sum
};

nlohmann::json summarise_row(const std::string& row, const std::vector<BenchSample>& repeats);
// world > 1 adds the total over ranks and the per-rank range.
std::string render_table(const nlohmann::json& rows, int world = 1);
std::string render_csv(const nlohmann::json& rows);

// A --reference file ({"meta", "rows"}, as scripts/reference_pytorch.py and reference_dali.py write it): "" when
// every row has what render_table and render_csv read, else what is missing, naming the row.
std::string reference_problem(const nlohmann::json& doc);
// references: [{"file", "meta", "rows"}]. Sets each row's "variant", its label in the table: the row's
// implementation and precision ("pytorch+compile bf16"), followed by the file where two files would share a label.
void label_references(nlohmann::json& references);

}  // namespace pinfeed::app

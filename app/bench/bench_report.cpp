#include "app/bench/bench_report.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/format.h"

namespace pinfeed::app {
namespace {
using nlohmann::json;

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// A row's figures for every repeat (bench.csv), and the medians the table shows.
constexpr const char* kRepeatFigures[] = {"samples_per_s", "wait_ms_p50", "wait_ms_mean", "gpu_idle", "h2d_ms_mean"};
constexpr const char* kMedianFigures[] = {"samples_per_s_median", "wait_ms_p50_median", "wait_ms_mean_median",
                                          "gpu_idle_median", "h2d_ms_median"};

// pinfeed's own rows carry no variant; a reference's rows are told apart by theirs.
std::string label_of(const json& r) {
  return (r.contains("variant") ? r["variant"] : r["implementation"]).get<std::string>();
}

}  // namespace

json summarise_row(const std::string& row, const std::vector<BenchSample>& reps) {
  json r;
  r["implementation"] = "pinfeed";
  r["mode"] = row;
  r["mode_ran"] = reps.empty() ? row : reps.front().mode_ran;
  // Each figure: every repeat, and the median of the repeats. (h2d keeps its older median name.)
  const std::tuple<const char*, const char*, double BenchSample::*> figures[] = {
      {"samples_per_s", "samples_per_s_median", &BenchSample::samples_per_s},
      {"wait_ms_p50", "wait_ms_p50_median", &BenchSample::wait_p50},
      {"wait_ms_mean", "wait_ms_mean_median", &BenchSample::wait_mean},
      {"loader_ms_mean", "loader_ms_mean_median", &BenchSample::loader_mean},
      {"ahead_ms_mean", "ahead_ms_mean_median", &BenchSample::ahead_mean},
      {"gpu_idle", "gpu_idle_median", &BenchSample::gpu_idle},
      {"h2d_ms_mean", "h2d_ms_median", &BenchSample::h2d_mean}};
  for (const auto& [name, median_name, member] : figures) {
    std::vector<double> v;
    json all = json::array();
    for (const auto& s : reps) {
      v.push_back(s.*member);
      all.push_back(common::num_or_null(s.*member));
    }
    r[name] = all;
    r[median_name] = common::num_or_null(median(v));
  }
  std::vector<double> totals;
  json per_rank = json::array(), total = json::array();
  for (const auto& s : reps) {
    json ranks = json::array();
    for (double x : s.per_rank_samples_per_s) ranks.push_back(common::num_or_null(x));
    per_rank.push_back(ranks);
    total.push_back(common::num_or_null(s.total_samples_per_s));
    totals.push_back(s.total_samples_per_s);
  }
  r["per_rank_samples_per_s"] = per_rank;
  r["total_samples_per_s"] = total;
  r["total_samples_per_s_median"] = common::num_or_null(median(totals));
  return r;
}

std::string render_table(const json& rows, int world) {
  double pageable = NAN, resident = NAN;
  for (const auto& r : rows) {
    if (r["implementation"] != "pinfeed" || r.contains("variant")) continue;  // this run's rows, not a reference's
    const json& median_rate = r["samples_per_s_median"];  // null: no repeat of the row finished
    if (r["mode"] == "pageable" && median_rate.is_number()) pageable = median_rate.get<double>();
    if (r["mode"] == kGpuResidentRow && median_rate.is_number()) resident = median_rate.get<double>();
  }
  std::ostringstream t;
  const bool ranks = world > 1;
  t << "| implementation | mode | wait ms p50 / mean | GPU idle % | h2d ms | samples/s median [min-max] | x vs pageable | % of gpu_resident |"
    << (ranks ? " total samples/s, " + std::to_string(world) + " ranks | per-rank samples/s [min-max] |" : "") << "\n"
    << "|---|---|---|---|---|---|---|---|" << (ranks ? "---|---|" : "") << "\n";
  auto get = [](const json& j) { return j.is_null() ? NAN : j.get<double>(); };
  for (const auto& r : rows) {
    const double med = get(r["samples_per_s_median"]);
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& x : r["samples_per_s"]) {
      if (x.is_null()) continue;
      lo = std::min(lo, x.get<double>());
      hi = std::max(hi, x.get<double>());
    }
    // Every cell reads as a value or "n/a": no unit after a missing figure, no range of none.
    const double wait_p50 = get(r["wait_ms_p50_median"]), wait_mean = get(r["wait_ms_mean_median"]);
    const std::string wait = std::isnan(wait_p50) && std::isnan(wait_mean)
                                 ? "n/a" : common::fixed(wait_p50, 2) + " / " + common::fixed(wait_mean, 2);
    const std::string rate = std::isnan(med) ? "n/a"
                             : std::isfinite(lo) ? common::fixed(med, 0) + " [" + common::fixed(lo, 0) + "-" + common::fixed(hi, 0) + "]"
                                                 : common::fixed(med, 0);
    const std::string mode = r["mode"].get<std::string>();
    const bool framing = mode == kLoaderOnlyRow || mode == kGpuResidentRow;
    // A mode that fell back (pinned memory over its budget runs pageable) says so in its own cell.
    const json ran = r.value("mode_ran", json());
    const std::string mode_cell = !framing && ran.is_string() && ran.get<std::string>() != mode
                                      ? mode + " (ran " + ran.get<std::string>() + ")" : mode;
    t << "| " << label_of(r) << " | " << mode_cell << " | " << wait << " | " << common::fixed(100 * get(r["gpu_idle_median"]), 1)
      << " | " << common::fixed(get(r["h2d_ms_median"]), 2) << " | " << rate << " | "
      << (framing ? std::string("") : common::times(med / pageable, 2)) << " | "
      << (mode == kLoaderOnlyRow ? std::string("") : common::percent(med / resident, 1)) << " |";
    if (ranks) {
      double rank_lo = INFINITY, rank_hi = -INFINITY;
      if (r.contains("per_rank_samples_per_s")) {
        for (const auto& rep : r["per_rank_samples_per_s"]) {
          for (const auto& x : rep) {
            if (x.is_null()) continue;
            rank_lo = std::min(rank_lo, x.get<double>());
            rank_hi = std::max(rank_hi, x.get<double>());
          }
        }
      }
      t << " " << (r.contains("total_samples_per_s_median") ? common::fixed(get(r["total_samples_per_s_median"]), 0) : "n/a")
        << " | " << (std::isfinite(rank_lo) ? common::fixed(rank_lo, 0) + "-" + common::fixed(rank_hi, 0) : "n/a") << " |";
    }
    t << "\n";
  }
  return t.str();
}

std::string render_csv(const json& rows) {
  std::ostringstream csv;
  csv << "implementation,mode,repeat,samples_per_s,wait_ms_p50,wait_ms_mean,gpu_idle,h2d_ms_mean\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < r["samples_per_s"].size(); ++i) {
      csv << label_of(r) << "," << r["mode"].get<std::string>() << "," << i + 1;
      for (const char* k : kRepeatFigures) {
        const auto& v = r[k][i];
        csv << "," << (v.is_null() ? "" : v.dump());
      }
      csv << "\n";
    }
  }
  return csv.str();
}

std::string reference_problem(const json& doc) {
  if (!doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array() || doc["rows"].empty()) {
    return "no \"rows\" array with a row in it";
  }
  if (doc.contains("meta") && !doc["meta"].is_object()) return "\"meta\" is not an object";
  const auto number = [](const json& j) { return j.is_null() || j.is_number(); };
  for (size_t i = 0; i < doc["rows"].size(); ++i) {
    const json& r = doc["rows"][i];
    std::string at = "row " + std::to_string(i);
    if (!r.is_object()) return at + " is not an object";
    for (const char* k : {"implementation", "mode"}) {
      if (!r.contains(k) || !r[k].is_string()) return at + ": \"" + k + "\" is missing or not a string";
    }
    at += " (" + r["mode"].get<std::string>() + ")";
    if (r.contains("precision") && !r["precision"].is_string()) return at + ": \"precision\" is not a string";
    for (const char* k : kMedianFigures) {
      if (!r.contains(k) || !number(r[k])) return at + ": \"" + k + "\" is missing or not a number (or null)";
    }
    if (r.contains("total_samples_per_s_median") && !number(r["total_samples_per_s_median"])) {
      return at + ": \"total_samples_per_s_median\" is not a number (or null)";
    }
    for (const char* k : kRepeatFigures) {
      const bool ok = r.contains(k) && r[k].is_array() && r[k].size() == r["samples_per_s"].size() &&
                      std::all_of(r[k].begin(), r[k].end(), number);
      if (!ok) return at + ": \"" + k + "\" is not an array of numbers (or null), one per repeat";
    }
  }
  return "";
}

void label_references(json& references) {
  std::map<std::string, std::set<size_t>> files_of;  // label -> the files that have it
  for (size_t f = 0; f < references.size(); ++f) {
    const json& meta = references[f]["meta"];
    const json meta_precision = meta.is_object() ? meta.value("precision", json()) : json();
    for (auto& r : references[f]["rows"]) {
      const json precision = r.value("precision", meta_precision);
      std::string label = r["implementation"].get<std::string>();
      if (precision.is_string()) label += " " + precision.get<std::string>();
      r["variant"] = label;
      files_of[label].insert(f);
    }
  }
  for (auto& ref : references) {
    for (auto& r : ref["rows"]) {
      const std::string label = r["variant"].get<std::string>();
      if (files_of[label].size() > 1) r["variant"] = label + " (" + ref["file"].get<std::string>() + ")";
    }
  }
}

}  // namespace pinfeed::app

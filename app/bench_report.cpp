#include "app/bench_report.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "app/format.h"

namespace pinfeed::app {
namespace {
using nlohmann::json;

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
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
      all.push_back(num_or_null(s.*member));
    }
    r[name] = all;
    r[median_name] = num_or_null(median(v));
  }
  std::vector<double> totals;
  json per_rank = json::array(), total = json::array();
  for (const auto& s : reps) {
    json ranks = json::array();
    for (double x : s.per_rank_samples_per_s) ranks.push_back(num_or_null(x));
    per_rank.push_back(ranks);
    total.push_back(num_or_null(s.total_samples_per_s));
    totals.push_back(s.total_samples_per_s);
  }
  r["per_rank_samples_per_s"] = per_rank;
  r["total_samples_per_s"] = total;
  r["total_samples_per_s_median"] = num_or_null(median(totals));
  return r;
}

std::string render_table(const json& rows, int world) {
  double pageable = NAN, resident = NAN;
  for (const auto& r : rows) {
    if (r["implementation"] != "pinfeed") continue;
    if (r["mode"] == "pageable") pageable = r["samples_per_s_median"].get<double>();
    if (r["mode"] == kGpuResidentRow) resident = r["samples_per_s_median"].get<double>();
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
    const bool framing = r["mode"] == kLoaderOnlyRow || r["mode"] == kGpuResidentRow;
    t << "| " << r["implementation"].get<std::string>() << " | " << r["mode"].get<std::string>() << " | "
      << fixed(get(r["wait_ms_p50_median"]), 2) << " / " << fixed(get(r["wait_ms_mean_median"]), 2) << " | "
      << fixed(100 * get(r["gpu_idle_median"]), 1) << " | " << fixed(get(r["h2d_ms_median"]), 2) << " | "
      << fixed(med, 0) << " [" << fixed(lo, 0) << "-" << fixed(hi, 0) << "] | "
      << (framing ? std::string("") : fixed(med / pageable, 2) + "x") << " | "
      << (r["mode"] == kLoaderOnlyRow ? std::string("") : fixed(100 * med / resident, 1) + "%") << " |";
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
      t << " " << (r.contains("total_samples_per_s_median") ? fixed(get(r["total_samples_per_s_median"]), 0) : "")
        << " | " << (std::isfinite(rank_lo) ? fixed(rank_lo, 0) + "-" + fixed(rank_hi, 0) : "") << " |";
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
      csv << r["implementation"].get<std::string>() << "," << r["mode"].get<std::string>() << "," << i + 1;
      for (const char* k : {"samples_per_s", "wait_ms_p50", "wait_ms_mean", "gpu_idle", "h2d_ms_mean"}) {
        const auto& v = r[k][i];
        csv << "," << (v.is_null() ? "" : v.dump());
      }
      csv << "\n";
    }
  }
  return csv.str();
}

}  // namespace pinfeed::app

#include "app/bench.h"

#include <CLI/CLI.hpp>
#include <ATen/ops/zeros.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>

#include "app/config.h"
#include "app/exit_codes.h"
#include "app/run_files.h"
#include "app/trainer.h"
#include "data/log.h"
#include "pipeline/step_meter.h"

namespace pinfeed::app {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kGpuResident = "gpu_resident";
constexpr const char* kLoaderOnly = "loader_only";

struct Sample {  // one repeat of one mode
  double samples_per_s = NAN, wait_p50 = NAN, wait_mean = NAN, gpu_idle = NAN, h2d_mean = NAN;
  double loader_mean = NAN, ahead_mean = NAN;
  std::string mode_ran;
};

json nan_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

// Runs warm-up + steps training steps from `feeder`, crossing epoch boundaries as needed.
Sample time_feeder(pipeline::Feeder& feeder, StepRunner& runner, const Config& c, const BenchArgs& a) {
  const c10::Device device = runner.device();
  pipeline::StepMeter meter(device);
  meter.start_epoch(a.warmup);
  int64_t epoch = 0;
  feeder.start_epoch(epoch);
  for (int s = 0; s < a.warmup + a.steps && !g_stop_requested; ++s) {
    meter.hold_back(static_cast<int>(c.pipeline.max_steps_ahead));
    auto b = feeder.next();
    if (!b) {
      feeder.start_epoch(++epoch);
      b = feeder.next();
    }
    meter.begin_step();
    runner.train_step(b->images, b->labels, c.train.lr);
    meter.end_step(b->size, b->timing);
  }
  const auto t = meter.finish_epoch();
  feeder.start_epoch(epoch + 1);  // abandons what is in flight before the feeder goes
  return {t.samples_per_s, t.wait_ms.p50, t.wait_ms.mean, t.gpu_idle, t.h2d_ms.mean, t.loader_ms.mean, t.ahead_ms.mean,
          feeder.mode()};
}

Sample time_gpu_resident(pipeline::Feeder& feeder, StepRunner& runner, const Config& c, const BenchArgs& a) {
  const c10::Device device = runner.device();
  feeder.start_epoch(0);
  auto b = feeder.next();
  const at::Tensor images = b->images.clone(), labels = b->labels.clone();
  pipeline::StepMeter meter(device);
  meter.start_epoch(a.warmup);
  for (int s = 0; s < a.warmup + a.steps && !g_stop_requested; ++s) {
    meter.hold_back(static_cast<int>(c.pipeline.max_steps_ahead));
    meter.begin_step();
    runner.train_step(images, labels, c.train.lr);
    meter.end_step(images.size(0), {});
  }
  const auto t = meter.finish_epoch();
  feeder.start_epoch(1);
  return {t.samples_per_s, t.wait_ms.p50, t.wait_ms.mean, t.gpu_idle, NAN, NAN, t.ahead_ms.mean, kGpuResident};
}

// The CPU pipeline alone: workers decode into a pageable ring, the consumer hands slots straight back.
Sample time_loader_only(const Datasets& sets, const Config& c, const BenchArgs& a) {
  const bool u8 = pipeline_options(c).transfer_dtype == pipeline::TransferDtype::kUint8;
  const int s = static_cast<int>(c.data.image_size);
  const auto lo = loader_options(c, true);
  pipeline::HostRing ring(lo.prefetch_batches + 2, lo.batch_size,
                          u8 ? std::vector<int64_t>{s, s, 3} : std::vector<int64_t>{3, s, s}, u8 ? c10::kByte : c10::kFloat,
                          false);
  data::Loader loader(sets.train, lo, &ring);
  int64_t epoch = 0, samples = 0;
  loader.start_epoch(epoch);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> waits;
  for (int step = 0; step < a.warmup + a.steps && !g_stop_requested; ++step) {
    if (step == a.warmup) t0 = std::chrono::steady_clock::now();
    const auto w0 = std::chrono::steady_clock::now();
    auto b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    if (step >= a.warmup) {
      samples += b->size;
      waits.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count());
    }
    loader.recycle(*b);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  loader.start_epoch(epoch + 1);
  const auto w = pipeline::summarize(waits);
  return {samples / secs, w.p50, w.mean, NAN, NAN, w.mean, NAN, kLoaderOnly};
}

std::vector<std::string> default_modes() {
  std::vector<std::string> m;
  for (const auto& p : pipeline::mode_presets()) m.push_back(p.name);
  m.push_back(kGpuResident);
  m.push_back(kLoaderOnly);
  return m;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "n/a";
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

// Markdown table over rows of pinfeed and (optionally) the Python reference.
std::string render_table(const json& rows) {
  double pageable = NAN, resident = NAN;
  for (const auto& r : rows) {
    if (r["implementation"] != "pinfeed") continue;
    if (r["mode"] == "pageable") pageable = r["samples_per_s_median"].get<double>();
    if (r["mode"] == kGpuResident) resident = r["samples_per_s_median"].get<double>();
  }
  std::ostringstream t;
  t << "| implementation | mode | wait ms p50 / mean | GPU idle % | h2d ms | samples/s median [min-max] | x vs pageable | % of gpu_resident |\n"
    << "|---|---|---|---|---|---|---|---|\n";
  auto get = [](const json& j) { return j.is_null() ? NAN : j.get<double>(); };
  for (const auto& r : rows) {
    const double med = get(r["samples_per_s_median"]);
    const auto& all = r["samples_per_s"];
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& x : all) {
      if (x.is_null()) continue;
      lo = std::min(lo, x.get<double>());
      hi = std::max(hi, x.get<double>());
    }
    t << "| " << r["implementation"].get<std::string>() << " | " << r["mode"].get<std::string>() << " | "
      << fixed(get(r["wait_ms_p50_median"]), 2) << " / " << fixed(get(r["wait_ms_mean_median"]), 2) << " | "
      << fixed(100 * get(r["gpu_idle_median"]), 1) << " | " << fixed(get(r["h2d_ms_median"]), 2) << " | "
      << fixed(med, 0) << " [" << fixed(lo, 0) << "-" << fixed(hi, 0) << "] | "
      << (r["mode"] == kLoaderOnly || r["mode"] == kGpuResident ? std::string("") : fixed(med / pageable, 2) + "x")
      << " | " << (r["mode"] == kLoaderOnly ? std::string("") : fixed(100 * med / resident, 1) + "%") << " |\n";
  }
  return t.str();
}

json summarise_row(const std::string& mode, const std::vector<Sample>& reps) {
  json r;
  r["implementation"] = "pinfeed";
  r["mode"] = mode;
  r["mode_ran"] = reps.empty() ? mode : reps.front().mode_ran;
  // Each figure: every repeat, and the median of the repeats. (h2d keeps its older median name.)
  const std::tuple<const char*, const char*, double Sample::*> figures[] = {
      {"samples_per_s", "samples_per_s_median", &Sample::samples_per_s},
      {"wait_ms_p50", "wait_ms_p50_median", &Sample::wait_p50},
      {"wait_ms_mean", "wait_ms_mean_median", &Sample::wait_mean},
      {"loader_ms_mean", "loader_ms_mean_median", &Sample::loader_mean},
      {"ahead_ms_mean", "ahead_ms_mean_median", &Sample::ahead_mean},
      {"gpu_idle", "gpu_idle_median", &Sample::gpu_idle},
      {"h2d_ms_mean", "h2d_ms_median", &Sample::h2d_mean}};
  for (const auto& [name, median_name, member] : figures) {
    std::vector<double> v;
    json all = json::array();
    for (const auto& s : reps) {
      v.push_back(s.*member);
      all.push_back(nan_null(s.*member));
    }
    r[name] = all;
    r[median_name] = nan_null(median(v));
  }
  return r;
}

json bench_meta(const Config& c, c10::Device device, const Datasets& sets, int workers, const BenchArgs& a) {
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  json m = {{"date", date}, {"implementation", "pinfeed"}, {"libtorch", TORCH_VERSION},
            {"device", device.str()}, {"cpu_cores", std::thread::hardware_concurrency()}, {"workers", workers},
            {"dataset", expand_user(c.data.root)}, {"train_images", sets.train->size()},
            {"image_size", c.data.image_size}, {"batch_size", c.train.batch_size}, {"precision", c.train.precision},
            {"channels_last", c.train.channels_last}, {"transfer_dtype", c.pipeline.transfer_dtype},
            {"prefetch_batches", c.data.prefetch_batches}, {"crop_decode", c.data.crop_decode},
            {"max_steps_ahead", c.pipeline.max_steps_ahead}, {"warmup_steps", a.warmup}, {"steps", a.steps},
            {"repeats", a.repeats}};
  if (device.is_cuda()) {
    const auto info = gpu::device_info(device.index());
    m["gpu"] = info.name;
    m["cuda_driver_api"] = info.driver;
    m["cuda_runtime"] = info.runtime;
  }
  return m;
}

}  // namespace

void add_bench_options(CLI::App& cmd, BenchArgs& a) {
  cmd.add_option("--config,-c", a.config, "TOML config (data, model, batch size, precision)")->required();
  cmd.add_option("--modes", a.modes, "comma-separated rows: presets, gpu_resident, loader_only")->delimiter(',');
  cmd.add_option("--repeats", a.repeats, "repeats per mode (interleaved)")->check(CLI::Range(1, 100));
  cmd.add_option("--warmup", a.warmup, "warm-up steps per repeat, excluded")->check(CLI::Range(0, 100000));
  cmd.add_option("--steps", a.steps, "timed steps per repeat")->check(CLI::Range(1, 1000000));
  cmd.add_option("--out", a.out, "output folder (table.md, bench.csv, bench.json)");
  cmd.add_option("--reference", a.reference, "JSON from scripts/reference_pytorch.py to show alongside");
  cmd.add_option("overrides", a.overrides, "section.key=value config overrides");
}

int run_bench(const BenchArgs& a) {
  install_signal_handlers();
  const Config c = load_config(a.config, a.overrides);
  const c10::Device device = resolve_device(c);
  const auto modes = a.modes.empty() ? default_modes() : a.modes;
  for (const auto& m : modes) {
    if (m != kGpuResident && m != kLoaderOnly && !pipeline::find_preset(m)) {
      throw ConfigError("--modes: unknown mode '" + m + "' (" + pipeline::preset_names() + " | gpu_resident | loader_only)");
    }
    if (!device.is_cuda() && m != "pageable" && m != kGpuResident && m != kLoaderOnly) {
      throw ConfigError("--modes: mode '" + m + "' needs a CUDA device (device is cpu)");
    }
  }
  configure_backend(c, device);
  Config cc = c;
  cc.train.eval = false;
  const Datasets sets = open_datasets(cc);
  StepRunner runner(c, sets.num_classes, device);
  const std::string out_dir = a.out.empty() ? make_run_dir(c.run.dir, "bench") : a.out;
  fs::create_directories(out_dir);

  std::map<std::string, std::vector<Sample>> results;
  int workers = 0;
  const int total = static_cast<int>(modes.size()) * a.repeats;
  int done = 0;
  for (int r = 0; r < a.repeats && !g_stop_requested; ++r) {
    for (const auto& mode : modes) {  // interleaved: drift over time hits every mode alike
      log::status("bench repeat " + std::to_string(r + 1) + "/" + std::to_string(a.repeats) + ": " + mode + " (" +
                      std::to_string(done) + "/" + std::to_string(total) + " done)",
                  false);
      Sample s;
      if (mode == kLoaderOnly) {
        s = time_loader_only(sets, c, a);
      } else {
        pipeline::PipelineOptions po = pipeline_options(c);
        pipeline::apply_preset(*pipeline::find_preset(mode == kGpuResident ? "pageable" : mode), po);
        pipeline::FeederOptions fo;
        fo.device = device;
        fo.channels_last = c.train.channels_last;
        pipeline::Feeder feeder(sets.train, loader_options(c, true), po, fo);
        workers = feeder.workers();
        s = mode == kGpuResident ? time_gpu_resident(feeder, runner, c, a) : time_feeder(feeder, runner, c, a);
      }
      log::info("  " + mode + ": " + fixed(s.samples_per_s, 1) + " samples/s, wait p50 " + fixed(s.wait_p50, 3) +
                " ms, GPU idle " + fixed(100 * s.gpu_idle, 1) + "%");
      results[mode].push_back(s);
      ++done;
    }
  }

  json doc;
  doc["meta"] = bench_meta(c, device, sets, workers, a);
  doc["rows"] = json::array();
  for (const auto& mode : modes) doc["rows"].push_back(summarise_row(mode, results[mode]));
  json table_rows = doc["rows"];
  if (!a.reference.empty()) {
    std::ifstream in(a.reference);
    if (!in) throw ConfigError("--reference: cannot open " + a.reference);
    const json ref = json::parse(in);
    doc["reference_meta"] = ref["meta"];
    for (const auto& r : ref["rows"]) table_rows.push_back(r);
  }
  const std::string table = render_table(table_rows);
  write_file_atomic((fs::path(out_dir) / "bench.json").string(), doc.dump(2) + "\n");
  write_file_atomic((fs::path(out_dir) / "table.md").string(), table);
  std::ostringstream csv;
  csv << "implementation,mode,repeat,samples_per_s,wait_ms_p50,wait_ms_mean,gpu_idle,h2d_ms_mean\n";
  for (const auto& r : table_rows) {
    for (size_t i = 0; i < r["samples_per_s"].size(); ++i) {
      csv << r["implementation"].get<std::string>() << "," << r["mode"].get<std::string>() << "," << i + 1;
      for (const char* k : {"samples_per_s", "wait_ms_p50", "wait_ms_mean", "gpu_idle", "h2d_ms_mean"}) {
        const auto& v = r[k][i];
        csv << "," << (v.is_null() ? "" : v.dump());
      }
      csv << "\n";
    }
  }
  write_file_atomic((fs::path(out_dir) / "bench.csv").string(), csv.str());
  std::printf("%s\nwritten to %s\n", table.c_str(), out_dir.c_str());
  return g_stop_requested ? kExitInterrupted : kExitOk;
}

}  // namespace pinfeed::app

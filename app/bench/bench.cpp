#include "app/bench/bench.h"

#include <CLI/CLI.hpp>
#include <torch/version.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "app/bench/bench_report.h"
#include "app/bench/bench_sources.h"
#include "app/config/config.h"
#include "engine/exit_codes.h"
#include "common/format.h"
#include "app/config/suggest.h"
#include "engine/dist/distributed.h"
#include "app/plan/datasets.h"
#include "app/plan/plan.h"
#include "app/run/run_files.h"
#include "engine/signals.h"
#include "engine/step/step_loop.h"
#include "engine/step/step_runner.h"
#include "engine/step/step_trace.h"
#include "common/log.h"
#include "data/dataset/image_folder.h"

namespace pinfeed::app {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A row differs from the others only in its batch source and its transfer mode.
enum class RowKind {
  kFeeder,       // a transfer-mode preset: the training pipeline
  kGpuResident,  // one batch, already on the device: the compute ceiling
  kLoaderOnly,   // the input pipeline, no model: the feed ceiling (with the GPU decoder: the Feeder decoding)
};

struct Row {
  std::string name;
  RowKind kind = RowKind::kFeeder;
  bool gpu_decode = false;  // kLoaderOnly with the GPU decoder: the Feeder decoding every batch, no model step
  bool augment = true;      // the Feeder applies the config's augmentations (train's); false: a -no_augment row
  Plan plan;  // the run's plan in this row's mode (pageable for the framing rows), checked for the device
};

constexpr const char* kNoAugmentSuffix = "-no_augment";

// Without --modes, every row the plan's device runs: on the CPU the presets that need CUDA are left out, said in
// one line (as train falls back to pageable there); a mode --modes names that cannot run is an error.
std::vector<Row> plan_rows(const Plan& plan, std::vector<std::string> names, bool augment_ab) {
  const bool every_row = names.empty();
  if (every_row) {
    for (const auto& p : pipeline::mode_presets()) names.push_back(p.name);
    names.push_back(kGpuResidentRow);
    names.push_back(kLoaderOnlyRow);
  }
  std::vector<Row> rows;
  std::vector<std::string> left_out;
  for (const auto& name : names) {
    Row row;
    row.name = name;
    row.kind = name == kGpuResidentRow ? RowKind::kGpuResident : name == kLoaderOnlyRow ? RowKind::kLoaderOnly
                                                                                       : RowKind::kFeeder;
    // The framing rows in mode pageable, except the feed ceiling of the GPU decoder: dual_stream's copier decoding
    // every batch on its copy stream, nothing stepping on them.
    row.gpu_decode = row.kind == RowKind::kLoaderOnly && plan.transform.gpu_decode;
    const pipeline::ModePreset* preset =
        pipeline::find_preset(row.kind == RowKind::kFeeder ? name : row.gpu_decode ? "dual_stream" : "pageable");
    if (!preset) {
      std::vector<std::string> known = {kGpuResidentRow, kLoaderOnlyRow};
      for (const auto& p : pipeline::mode_presets()) known.push_back(p.name);
      throw ConfigError("--modes: unknown mode '" + data::printable(name) + "'" + did_you_mean(name, known) + " (" +
                        pipeline::preset_names() + " | " + kGpuResidentRow + " | " + kLoaderOnlyRow + ")");
    }
    try {
      row.plan = with_mode(plan, *preset);  // the same device checks as train
    } catch (const ConfigError& e) {
      if (!every_row) throw ConfigError(std::string("--modes: ") + e.what());
      left_out.push_back(name);
      continue;
    }
    rows.push_back(row);
    if (augment_ab && row.kind == RowKind::kFeeder) {  // the same mode without the augmentations, right after it
      row.name += kNoAugmentSuffix;
      row.augment = false;
      rows.push_back(std::move(row));
    }
  }
  if (!left_out.empty() && plan.dist_env.rank == 0) {
    std::string modes;
    for (const std::string& name : left_out) modes += (modes.empty() ? "" : ", ") + name;
    log::info("bench on " + plan.device.str() + ": modes " + modes + " left out, they need a CUDA device (--modes "
              "picks the rows)");
  }
  return rows;
}

BenchSample sample_of(const pipeline::EpochTiming& t, const std::string& mode_ran) {
  BenchSample s;
  s.samples_per_s = t.samples_per_s;
  s.wait_p50 = t.wait_ms.p50;
  s.wait_mean = t.wait_ms.mean;
  s.gpu_idle = t.gpu_idle;
  s.h2d_mean = t.h2d_ms.mean;
  s.loader_mean = t.loader_ms.mean;
  s.ahead_mean = t.ahead_ms.mean;
  s.mode_ran = mode_ran;
  return s;
}

// One repeat of one row on this rank: warm-up + steps through the step loop, crossing epoch boundaries.
BenchSample run_row_here(const Row& row, const Datasets& sets, engine::StepRunner& runner, engine::Distributed& dist,
                         const engine::StopRequest& stop, const BenchArgs& a, engine::StepTrace* trace, int* workers) {
  engine::StepLoopOptions loop;
  loop.end_step = a.warmup + a.steps;
  loop.warmup_steps = a.warmup;
  loop.max_steps_ahead = row.plan.loop.max_steps_ahead;
  loop.wrap = true;
  loop.stop = &stop;
  loop.dist = &dist;
  loop.device = row.plan.device;
  loop.stream = row.plan.compute_stream;
  loop.trace = trace;
  loop.trace_offset = -a.warmup;  // --trace-steps counts the timed steps
  const double lr = row.plan.schedule.peak_lr();
  auto train_step = [&](const pipeline::DeviceBatch& b, int64_t) { runner.train_step(b.images, b.labels, lr); };

  data::LoaderOptions loader = row.plan.train_loader;
  loader.stop_requested = engine::stop_after_grace(stop);
  if (row.kind == RowKind::kLoaderOnly && !row.gpu_decode) {
    LoaderOnly source(sets.train, loader);
    *workers = source.workers();  // a bench of loader_only alone reports its threads too
    pipeline::StepMeter wall_clock(std::nullopt);
    return sample_of(engine::run_steps(source, wall_clock, loop, [](const pipeline::DeviceBatch&, int64_t) {}).timing,
                     kLoaderOnlyRow);
  }
  const pipeline::augment::AugmentOptions augment =
      row.augment ? train_augment(row.plan, sets.num_classes) : pipeline::augment::AugmentOptions{};
  pipeline::Feeder feeder(sets.train, loader, row.plan.pipeline, row.plan.feeder, augment);
  *workers = feeder.workers();
  pipeline::StepMeter meter(row.plan.compute_stream);
  if (row.kind == RowKind::kGpuResident) {
    feeder.start_epoch(0);
    ResidentBatch resident(*feeder.next());
    feeder.start_epoch(1);  // abandons what is in flight before the feeder goes
    return sample_of(engine::run_steps(resident, meter, loop, train_step).timing, kGpuResidentRow);
  }
  const auto no_step = [](const pipeline::DeviceBatch&, int64_t) {};
  const engine::StepLoopResult r = row.gpu_decode ? engine::run_steps(feeder, meter, loop, no_step) : engine::run_steps(feeder, meter, loop, train_step);
  feeder.start_epoch(r.epoch + 1);  // abandons what is in flight before the feeder goes
  if (const auto d = feeder.decode_stats()) log::info("  nvJPEG: " + pipeline::describe(*d));
  return sample_of(r.timing, row.gpu_decode ? kLoaderOnlyRow : feeder.mode());
}

// Several ranks run the same row at once (the gradient all-reduce in every step); rank 0 collects their rates.
BenchSample run_row(const Row& row, const Datasets& sets, engine::StepRunner& runner, engine::Distributed& dist,
                    const engine::StopRequest& stop, const BenchArgs& a, engine::StepTrace* trace, int* workers) {
  BenchSample s = run_row_here(row, sets, runner, dist, stop, a, trace, workers);
  s.per_rank_samples_per_s = dist.all_gather({s.samples_per_s});
  s.total_samples_per_s = 0;
  for (double x : s.per_rank_samples_per_s) s.total_samples_per_s += x;
  return s;
}

json bench_meta(const Plan& plan, const Datasets& sets, int workers, const BenchArgs& a) {
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  json m = {{"date", date}, {"implementation", "pinfeed"}, {"libtorch", TORCH_VERSION},
            {"device", plan.device.str()}, {"cpu_cores", std::thread::hardware_concurrency()}, {"workers", workers},
            {"dataset", plan.dataset.root}, {"train_images", sets.train->size()},
            {"image_size", plan.transform.size}, {"batch_size", plan.train_loader.batch_size},
            {"precision", name_of(plan.step.precision)}, {"channels_last", plan.step.channels_last},
            {"transfer_dtype", pipeline::to_string(plan.pipeline.transfer_dtype)},
            {"prefetch_batches", plan.train_loader.prefetch_batches}, {"crop_decode", plan.transform.crop_decode},
            {"decoder", plan.transform.gpu_decode ? "nvjpeg" : "cpu"}, {"nvjpeg_share", plan.transform.nvjpeg_share},
            {"max_steps_ahead", plan.loop.max_steps_ahead}, {"warmup_steps", a.warmup}, {"steps", a.steps},
            {"repeats", a.repeats}, {"trace_steps", a.trace_steps}, {"cuda_graph", plan.step.cuda_graph},
            {"fused_bn", plan.step.net.fused_bn}, {"stem_max_pool", plan.step.net.stem_max_pool},
            {"fold_grad_add", plan.step.net.fold_grad_add}, {"bn_graph", model::to_string(plan.step.net.bn_graph)},
            {"auto_augment", pipeline::augment::policy_text(plan.augment.auto_augment)},
            {"random_erasing", plan.augment.erasing_p}, {"mixup_alpha", plan.augment.mixup_alpha},
            {"cutmix_alpha", plan.augment.cutmix_alpha}, {"augment_ab", a.augment_ab}};
  if (plan.device.is_cuda()) {
    const auto info = gpu::device_info(plan.device.index());
    m["gpu"] = info.name;
    m["cuda_driver_api"] = info.driver;
    m["cuda_runtime"] = info.runtime;
    const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");  // start.cpp sets it for the GPU decoder
    m["cuda_device_max_connections"] = queues ? queues : "";
  }
  return m;
}

int bench_rows(const Plan& plan, const std::vector<Row>& rows, engine::Distributed& dist, const engine::StopRequest& stop,
               const BenchArgs& a, const std::optional<engine::StepRange>& trace_steps);

// Every --reference file (CLI11 joins repeated ones with '\n'), read and checked before the first row: a typo
// stops the bench at once, not after its rows. [{"file", "meta", "rows"}], each row labelled (label_references).
json read_references(const std::string& joined) {
  json references = json::array();
  std::istringstream paths(joined);
  for (std::string path; std::getline(paths, path);) {
    if (path.empty()) continue;
    std::ifstream in(path);
    if (!in) throw ConfigError("--reference " + path + ": cannot open");
    json doc;
    try {
      doc = json::parse(in);
    } catch (const json::parse_error& e) {
      throw ConfigError("--reference " + path + ": not JSON (" + e.what() + ")");
    }
    if (const std::string problem = reference_problem(doc); !problem.empty()) {
      throw ConfigError("--reference " + path + ": " + problem +
                        " (expected the JSON of scripts/reference_pytorch.py, reference_dali.py or pinfeed bench)");
    }
    references.push_back({{"file", path}, {"meta", doc.value("meta", json())}, {"rows", doc["rows"]}});
  }
  label_references(references);
  return references;
}

// --trace-steps, checked against --steps before anything runs.
std::optional<engine::StepRange> trace_steps_of(const BenchArgs& a) {
  std::optional<engine::StepRange> range;
  try {
    range = parse_step_range(a.trace_steps);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("--trace-steps ") + e.what());
  }
  if (range && range->last >= a.steps) {
    throw ConfigError("--trace-steps " + range->text() + " goes past the last timed step, " + std::to_string(a.steps - 1) +
                      " (--steps " + std::to_string(a.steps) + ", numbered from 0 after the --warmup steps)");
  }
  return range;
}

}  // namespace

void add_bench_options(CLI::App& cmd, BenchArgs& a) {
  cmd.add_option("--config,-c", a.start.config, "TOML config (data, model, batch size, precision)")->required();
  cmd.add_option("--modes", a.modes, "comma-separated rows: presets, gpu_resident, loader_only (default: all)")
      ->delimiter(',')
      ->allow_extra_args(false);  // one word after --modes: a key=value after it is an override, not a mode
  cmd.add_option("--repeats", a.repeats, "repeats per mode (interleaved)")->check(CLI::Range(1, 100));
  cmd.add_option("--warmup", a.warmup, "warm-up steps per repeat, excluded")->check(CLI::Range(0, 100000));
  cmd.add_option("--steps", a.steps, "timed steps per repeat")->check(CLI::Range(1, 1000000));
  cmd.add_option("--out", a.out, "output folder (table.md, bench.csv, bench.json); default: <run.dir>/<time>-bench");
  cmd.add_option("--reference", a.reference,
                 "JSON from scripts/reference_pytorch.py or reference_dali.py to show alongside; repeatable, each "
                 "file checked before the rows run (default: none)")
      ->join();  // one string, the files separated by '\n': read_references splits it
  add_device_options(cmd, a.start);
  cmd.add_option("--trace-steps", a.trace_steps,
                 "A-B: Kineto trace (Perfetto) of timed steps A to B (0 = the first after --warmup) of each row's "
                 "first repeat, into --out as trace.<row>.json (default: none)");
  cmd.add_flag("--augment-ab", a.augment_ab,
               "each transfer-mode row also runs without the config's augmentations (data.auto_augment, "
               "data.random_erasing, data.mixup_*), as <mode>-no_augment, interleaved with it");
  cmd.add_option("overrides", a.start.overrides, "section.key=value config overrides");
}

int run_bench(const BenchArgs& a, const engine::StopRequest& stop) {
  const std::optional<engine::StepRange> trace_steps = trace_steps_of(a);  // checked before the config is read
  Plan plan = start(a.start);
  if (plan.transform.schedule.active()) {  // rows crossing epochs would change side under the timing
    log::info("bench times one side, data.image_size = " + std::to_string(plan.transform.size) +
              " px; the data.image_size schedule is train's (set data.image_size to bench another side)");
    plan.transform.schedule = {};
  }
  if (a.augment_ab && !plan.augment.any()) {
    throw ConfigError("--augment-ab compares rows with and without the config's augmentations, but it sets none: set "
                      "data.auto_augment, data.random_erasing, data.mixup_alpha or data.cutmix_alpha");
  }
  const std::vector<Row> rows = plan_rows(plan, a.modes, a.augment_ab);
  engine::Distributed dist(plan.dist_env, plan.device, name_of(plan.backend), plan.dist.timeout(),
                          plan.dist.one_rank_group);
  return dist.guard([&] { return bench_rows(plan, rows, dist, stop, a, trace_steps); });
}

namespace {
int bench_rows(const Plan& plan, const std::vector<Row>& rows, engine::Distributed& dist, const engine::StopRequest& stop,
               const BenchArgs& a, const std::optional<engine::StepRange>& trace_steps) {
  const json references = dist.is_main() ? read_references(a.reference) : json::array();  // rank 0 writes the table
  dist.agree("config", to_toml(plan), "config");
  configure_backend(plan);
  const Datasets sets = open_datasets(plan, /*with_val=*/false);
  if (plan.transform.gpu_decode) {
    // A file meant for the GPU is checked by libjpeg once per run (data/dataset/dataset.h); done here with every core, so
    // that the rows time the steady state a run reaches after its first epoch.
    const auto t0 = std::chrono::steady_clock::now();
    sets.train->check_gpu_files(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    log::info("checked the JPEGs the GPU decodes once, on the CPU: " + common::fixed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1) + " s");
  }
  engine::StepRunner runner(plan.step, sets.num_classes, &dist);
  std::string out_dir;
  if (dist.is_main()) {
    out_dir = a.out.empty() ? make_run_dir(plan.run.dir, "bench") : a.out;
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw engine::OutputError("--out " + out_dir + ": cannot create the folder: " + ec.message());
  }

  std::map<std::string, std::vector<BenchSample>> results;
  int workers = 0;
  const int total = static_cast<int>(rows.size()) * a.repeats;
  int done = 0;
  engine::training_started();  // from here the first Ctrl-C ends the repeats and still writes the table
  for (int r = 0; r < a.repeats && !stop.requested(); ++r) {
    for (const Row& row : rows) {  // interleaved: drift over time hits every row alike
      if (dist.is_main()) log::status("bench repeat " + std::to_string(r + 1) + "/" + std::to_string(a.repeats) + ": " + row.name + " (" +
                      std::to_string(done) + "/" + std::to_string(total) + " done)",
                  false);
      std::unique_ptr<engine::StepTrace> trace;  // rank 0, first repeat
      if (trace_steps && r == 0 && dist.is_main()) {
        trace = std::make_unique<engine::StepTrace>(*trace_steps, (fs::path(out_dir) / ("trace." + row.name + ".json")).string(),
                                            row.plan.device, json{{"command", "bench"}, {"row", row.name}});
      }
      const BenchSample s = run_row(row, sets, runner, dist, stop, a, trace.get(), &workers);
      log::info("  " + row.name + ": " + common::fixed(s.samples_per_s, 1) + " samples/s, wait p50 " + common::fixed(s.wait_p50, 3) +
                " ms, GPU idle " + common::percent(s.gpu_idle, 1) +
                (dist.active() && dist.is_main() ? "; all ranks " + common::fixed(s.total_samples_per_s, 1) + " samples/s" : ""));
      results[row.name].push_back(s);
      ++done;
    }
  }

  if (!dist.is_main()) return stop.requested() ? engine::kExitInterrupted : engine::kExitOk;
  json doc;
  doc["meta"] = bench_meta(plan, sets, workers, a);
  doc["meta"]["world_size"] = dist.world();
  doc["meta"]["bucket_mb"] = plan.step.bucket_mb;
  doc["meta"]["one_rank_group"] = plan.dist.one_rank_group;
  doc["meta"]["overlap"] = plan.step.overlap;
  doc["rows"] = json::array();
  for (const Row& row : rows) doc["rows"].push_back(summarise_row(row.name, results[row.name]));
  json table_rows = doc["rows"];
  if (!references.empty()) {
    if (references.size() == 1) doc["reference_meta"] = references[0]["meta"];  // where one file always was
    doc["references"] = references;
    for (const auto& ref : references) {
      for (const auto& r : ref["rows"]) table_rows.push_back(r);
    }
  }
  const std::string table = render_table(table_rows, dist.world());
  engine::write_file_atomic((fs::path(out_dir) / "bench.json").string(), doc.dump(2) + "\n");
  engine::write_file_atomic((fs::path(out_dir) / "table.md").string(), table);
  engine::write_file_atomic((fs::path(out_dir) / "bench.csv").string(), render_csv(table_rows));
  log::info("bench on " + plan.device.str() + ": " + common::count_of(workers, "worker") + ", batch " +
            std::to_string(plan.train_loader.batch_size) + ", " + name_of(plan.step.precision) + ", " +
            common::count_of(a.repeats, "repeat") + " of " + common::count_of(a.steps, "timed step") +
            (dist.active() ? ", " + common::count_of(dist.world(), "rank") : ""));
  std::printf("%s\nwritten to %s\n", table.c_str(), out_dir.c_str());
  return stop.requested() ? engine::kExitInterrupted : engine::kExitOk;
}
}  // namespace

}  // namespace pinfeed::app

// pinfeed: train a ResNet from an ImageFolder, generate sample data, benchmark host-to-device modes.
#include <CLI/CLI.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "app/bench/bench.h"
#include "app/cli/command_line.h"
#include "app/config/config.h"
#include "engine/errors.h"
#include "engine/exit_codes.h"
#include "common/format.h"
#include "app/config/suggest.h"
#include "engine/dist/distributed.h"
#include "app/eval/eval.h"
#include "app/eval/predict.h"
#include "app/plan/start.h"
#include "app/run/metrics.h"
#include "app/run/run_files.h"
#include "engine/signals.h"
#include "app/train/resume.h"
#include "app/train/trainer.h"
#include "common/log.h"
#include "data/loader/detached.h"
#include "data/error.h"
#include "data/dataset/image_folder.h"
#include "data/dataset/synthetic.h"
#include "pipeline/error_text.h"
#include "pipeline/transfer/options.h"

namespace {

using namespace pinfeed;

int print_config_help(bool markdown, bool json) {
  if (json) {  // the defaults, for scripts that must not restate them
    std::fputs(app::to_json(app::Config{}).c_str(), stdout);
    return engine::kExitOk;
  }
  if (markdown) {  // docs/config-keys.md's table (a test compares the two)
    std::fputs(app::config_keys_markdown().c_str(), stdout);
    return engine::kExitOk;
  }
  std::printf("Config keys ([section] key = value in TOML; override on the command line as section.key=value):\n\n");
  for (const auto& k : app::config_keys()) {
    std::printf("  %-28s %-8s default %-10s %s\n", k.name.c_str(), k.type.c_str(), k.default_value.c_str(), k.help.c_str());
  }
  std::printf("\nModes (pipeline.mode or --mode):\n");
  for (const auto& p : pipeline::mode_presets()) std::printf("  %-20s %s\n", p.name, p.description);
  return engine::kExitOk;
}

int print_metrics_help() {
  std::printf("Per-epoch metrics (metrics.jsonl, metrics.csv in the run folder; null or empty = not applicable):\n\n");
  for (const app::Metric& m : app::kEpochMetrics) std::printf("  %-22s %s\n", m.name, m.meaning);
  std::printf("\nPer-step figures (steps.jsonl, with run.log_steps = true):\n\n");
  for (const app::Metric& m : app::kStepMetrics) std::printf("  %-22s %s\n", m.name, m.meaning);
  return engine::kExitOk;
}

// "WxH", digits only and the whole text: "64x64px" is refused, not read as 64x64, and 4294967360 not as 64.
bool parse_size(const std::string& text, int* width, int* height) {
  const size_t x = text.find('x');
  const auto digits = [&](size_t from, size_t to) {
    return from < to && std::all_of(text.begin() + from, text.begin() + to,
                                    [](unsigned char c) { return std::isdigit(c) != 0; });
  };
  if (x == std::string::npos || !digits(0, x) || !digits(x + 1, text.size())) return false;
  const char* s = text.data();
  return std::from_chars(s, s + x, *width).ec == std::errc() &&
         std::from_chars(s + x + 1, s + text.size(), *height).ec == std::errc();
}

int gen_data(data::SyntheticOptions so, const std::string& size, bool overwrite) {
  constexpr int lo = data::SyntheticOptions::kMinSide, hi = data::SyntheticOptions::kMaxSide;
  if (!parse_size(size, &so.width, &so.height) || so.width < lo || so.width > hi || so.height < lo || so.height > hi) {
    log::error("gen-data: --size must be WxH with each side " + std::to_string(lo) + " to " + std::to_string(hi) +
               ", got '" + data::printable(size) + "'");
    return engine::kExitUsage;
  }
  // An existing dataset is never written over unasked. A folder that cannot be listed is left to the generator,
  // which says what it cannot write.
  std::error_code ec;
  if (!overwrite && std::filesystem::is_directory(so.out, ec) && !std::filesystem::is_empty(so.out, ec) && !ec) {
    log::error("gen-data: --out " + data::printable(so.out) + " is not empty: name a new or empty folder, or pass "
               "--overwrite to write into it");
    return engine::kExitUsage;
  }
  try {
    const int64_t n = data::generate_synthetic(so);
    log::info("wrote " + std::to_string(n) + " images to " + so.out);
    return engine::kExitOk;
  } catch (const data::SyntheticWriteError& e) {
    log::error("gen-data: " + std::string(e.what()));
    return engine::kExitOutput;
  }
}

// pinfeed help TOPIC: the topics besides the subcommands (whose --help it prints).
constexpr const char* kHelpTopics[] = {"config", "metrics"};

int run(int argc, char** argv) {
  CLI::App cli{"pinfeed: is the GPU computing, or waiting for data? ResNet training with switchable "
               "host-to-device transfer modes."};
  cli.require_subcommand(1);
  cli.option_defaults()->always_capture_default();  // every --help shows each option's default
  cli.set_version_flag("--version", "pinfeed 0.1.0");

  auto* train = cli.add_subcommand("train", "train a ResNet (model.arch) from a TOML config");
  app::StartArgs start;
  std::string resume;
  train->add_option("--config,-c", start.config,
                    "TOML config file (required, but with --resume PATH: default the run folder's latest config)");
  train->add_option("--mode", start.mode, "transfer mode preset: " + pipeline::preset_names() +
                                              " (default: the config's pipeline.mode)");
  app::add_device_options(*train, start);
  train->add_option("--resume", resume, "continue from a checkpoint: PATH or 'last' (newest run with this run.name; "
                                        "default: none, a new run)");
  int64_t stop_after_steps = 0;
  train->add_option("--stop-after-steps", stop_after_steps, "stop as on Ctrl-C after N steps (tests)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->group("");  // hidden
  train->add_option("overrides", start.overrides, "section.key=value, TOML value syntax (e.g. train.lr=0.2 data.root=\"/x\")");

  auto* gen = cli.add_subcommand("gen-data", "write a learnable synthetic ImageFolder of JPEG files");
  data::SyntheticOptions so;
  std::string size = "64x64";
  bool overwrite = false;
  gen->add_option("--out", so.out, "output root (train/ and val/ go under it): a new or empty folder, unless --overwrite")
      ->required();
  gen->add_flag("--overwrite", overwrite, "write into a non-empty --out: files of the same names are replaced, any "
                                          "others (other classes, more images per class) stay");
  gen->add_option("--classes", so.classes, "number of classes")->check(CLI::Range(1, 100000));
  gen->add_option("--train-per-class", so.train_per_class, "training images per class")->check(CLI::Range(0, 10000000));
  gen->add_option("--val-per-class", so.val_per_class, "validation images per class")->check(CLI::Range(0, 10000000));
  gen->add_option("--size", size, "image size WxH, each side " + std::to_string(data::SyntheticOptions::kMinSide) +
                                       " to " + std::to_string(data::SyntheticOptions::kMaxSide) +
                                       ", e.g. 64x64 or 500x375");
  gen->add_flag("--photo", so.photo, "ImageNet-like files: textured and noisy (~100-150 KB at 500x375)");
  gen->add_option("--quality", so.quality, "JPEG quality")->check(CLI::Range(1, 100));
  gen->add_option("--seed", so.seed, "seed");
  gen->add_option("--threads", so.threads, "encoder threads (0: all cores; fewer for images too large for 2 GiB "
                                           "together)")->check(CLI::Range(0, 1024));

  app::BenchArgs bench_args;
  auto* bench = cli.add_subcommand("bench", "compare transfer modes on the same data: samples/s, wait, GPU idle");
  app::add_bench_options(*bench, bench_args);

  app::EvalArgs eval_args;
  auto* eval = cli.add_subcommand("eval", "top-1, top-5 and loss of a checkpoint or a state dict on a split");
  app::add_eval_options(*eval, eval_args);
  app::PredictArgs predict_args;
  auto* predict = cli.add_subcommand("predict", "the top-k classes of images, from a checkpoint or a state dict");
  app::add_predict_options(*predict, predict_args);

  auto* help = cli.add_subcommand("help", "more help: 'pinfeed help config' lists every config key, 'pinfeed help metrics' every per-epoch metric, 'pinfeed help CMD' a command's options");
  std::string topic;
  help->add_option("topic", topic, "config | metrics | a command (default: the list of commands)");
  bool markdown = false;
  help->add_flag("--markdown", markdown, "config: the key table as Markdown (docs/config-keys.md's)");
  bool json = false;
  help->add_flag("--json", json, "config: every key's default as JSON, {\"section\": {\"key\": value}}");

  if (const std::string problem = app::misuse(cli, argc, argv); !problem.empty()) {
    log::error(problem);
    return engine::kExitUsage;
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return cli.exit(e);  // --help, --version
    log::error(app::parse_error_text(cli, e, argc, argv));
    return engine::kExitUsage;
  }

  if (*help) {
    if (topic == "config") return print_config_help(markdown, json);
    if (topic == "metrics") return print_metrics_help();
    if (topic.empty()) {  // the commands (cli.help() would show the selected command's: help's own)
      std::cout << cli.get_formatter()->make_help(&cli, cli.get_name(), CLI::AppFormatMode::Normal);
      return engine::kExitOk;
    }
    std::vector<std::string> topics(std::begin(kHelpTopics), std::end(kHelpTopics));
    for (const CLI::App* sub : cli.get_subcommands({})) {
      if (sub->get_name() == topic && sub != help) {
        std::cout << sub->help();
        return engine::kExitOk;
      }
      if (sub != help) topics.push_back(sub->get_name());
    }
    std::string all;
    for (const auto& t : topics) all += (all.empty() ? "" : " | ") + t;
    log::error("help: unknown topic '" + data::printable(topic) + "'" + app::did_you_mean(topic, topics) +
               " (topics: " + all + ")");
    return engine::kExitUsage;
  }
  if (*gen) return gen_data(so, size, overwrite);
  if (*bench) return app::run_bench(bench_args, engine::signal_stop());
  if (*eval) return app::run_eval(eval_args, engine::signal_stop());
  if (*predict) return app::run_predict(predict_args);

  if (start.config.empty()) {  // a resume of PATH continues with the config its run wrote
    if (resume.empty() || resume == "last") {
      log::error(std::string("train: --config is required") +
                 (resume.empty() ? " (or --resume PATH, which takes the run folder's config)"
                                 : " with --resume last (its run.dir and run.name say where to look)") +
                 " (pinfeed train --help lists its options)");
      return engine::kExitUsage;
    }
    start.config = app::run_config_of(resume);
  }
  const app::TrainResult result = app::train(app::start(start), {resume, stop_after_steps}, engine::signal_stop());
  if (result.interrupted) return engine::kExitInterrupted;
  return engine::kExitOk;
}

}  // namespace

static int exit_code(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const data::Interrupted& e) {
    // A stop came while no batch could come (a stuck read or decode); training has said what it saved.
    log::error(e.what());
    return engine::kExitInterrupted;
  } catch (const engine::PeerFailed& e) {
    log::error(e.what());
    return engine::kExitPeerFailed;
  } catch (const app::Diverged& e) {
    log::error(e.what());
    return engine::kExitDiverged;
  } catch (const app::ConfigError& e) {
    log::error(e.what());
    return engine::kExitUsage;
  } catch (const engine::InputError& e) {
    log::error(e.what());
    return engine::kExitUsage;
  } catch (const DataError& e) {
    log::error(e.what());
    return engine::kExitData;
  } catch (const engine::OutputError& e) {
    log::error(std::string(e.what()) + " (nothing written before this point was changed)");
    return engine::kExitOutput;
  } catch (const c10::Error& e) {
    log::error("LibTorch: " + error_text(e));
    return engine::kExitFailure;
  } catch (const std::exception& e) {
    log::error(e.what());
    return engine::kExitFailure;
  }
}

int main(int argc, char** argv) {
  const int code = exit_code(argc, argv);
  if (pinfeed::data::detached_threads() > 0) {
    // A worker stuck in a read or decode was left running (data/loader/detached.h): end the process without running
    // static destructors under it. Every output was written and synced before this point.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }
  return code;
}

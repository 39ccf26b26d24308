#include "app/eval/eval.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <optional>

#include "app/cli/command_line.h"
#include "engine/exit_codes.h"
#include "common/format.h"
#include "engine/dist/distributed.h"
#include "engine/checkpoint/checkpoint.h"
#include "app/run/run_record.h"
#include "engine/step/step_runner.h"
#include "model/resnet.h"
#include "app/train/evaluate.h"
#include "app/train/progress.h"
#include "app/train/resume.h"
#include "common/log.h"
#include "data/dataset/image_folder.h"
#include "pipeline/error_text.h"
#include "pipeline/transfer/feeder.h"

namespace pinfeed::app {
namespace {

// What rank 0 reads in the file and every rank needs: the classifier's outputs (fc.weight's rows), the class
// names (a pinfeed checkpoint's; none in a state dict) and the validation geometry it was validated with (a
// pinfeed checkpoint's recorded data.* keys: side and resize ratio; null in a state dict).
nlohmann::json model_facts(const engine::Weights& w, const std::string& path) {
  const WeightsNetwork net = network_of(w.model, path);
  nlohmann::json facts = {{"num_classes", net.num_classes}, {"classes", w.classes}, {"validated", nullptr},
                          {"blurpool", nullptr}, {"arch", model::spec_of(net.arch).name}};
  if (!w.config.empty()) {
    try {
      const Config recorded = parse_config_string(w.config, path + " (its recorded config)");
      const data::TransformOptions& t = recorded.transform;
      facts["validated"] = {{"side", data::side_of(t, /*train=*/false, 0)}, {"ratio", t.val_resize_ratio}};
      facts["blurpool"] = recorded.step.net.blurpool;
    } catch (const ConfigError& e) {
      log::warn(error_text(e) + "; evaluating with the config's validation transform");
    }
  }
  return facts;
}

bool from_command_line(const Plan& plan, const std::string& key) {
  return location_of(plan, key).rfind("override '", 0) == 0;
}

// The validation side and resize ratio to evaluate at: the checkpoint's, which its accuracy was measured at, unless
// the command line sets data.image_size, data.val_image_size or data.val_resize_ratio; the config's for a state
// dict. Rank 0 says in one line when the config's differ.
data::TransformOptions eval_transform(const Plan& plan, const nlohmann::json& validated, const std::string& path,
                                      bool main) {
  data::TransformOptions t = plan.transform;
  if (validated.is_null()) return t;
  for (const char* key : {"data.image_size", "data.val_image_size", "data.val_resize_ratio"}) {
    if (from_command_line(plan, key)) return t;
  }
  const int side = validated.at("side").get<int>(), config_side = data::side_of(t, /*train=*/false, 0);
  const double ratio = validated.at("ratio").get<double>();
  if (side == config_side && ratio == t.val_resize_ratio) return t;
  if (main) {
    const std::string key = plan.locations.count("data.val_image_size") ? "data.val_image_size" : "data.image_size";
    log::warn("evaluating at " + std::to_string(side) + " px, val_resize_ratio " + common::fmt_ms(ratio) + ", as " + path +
              " was validated; the config says " + std::to_string(config_side) + " px, " +
              common::fmt_ms(t.val_resize_ratio) + " (" + location_of(plan, key) + "): give data.val_image_size=" +
              std::to_string(config_side) + " to evaluate at its side");
  }
  t.val_size = side;
  t.val_resize_ratio = ratio;
  return t;
}

// Without -c: the config the checkpoint's run folder holds (as `train --resume PATH` takes), else the one the
// checkpoint records. A state dict records none.
StartArgs with_checkpoint_config(StartArgs args, const std::string& checkpoint) {
  if (!args.config.empty()) return args;
  const std::string dir = std::filesystem::path(checkpoint).parent_path().string();
  if (is_run_folder(dir.empty() ? "." : dir)) {
    args.config = run_config_of(checkpoint);
    return args;
  }
  const engine::Weights w = engine::load_weights(checkpoint);
  if (w.config.empty()) {
    throw ConfigError("eval: " + checkpoint + " is a state dict, which records no config: give -c CONFIG (its " +
                      "data.root at least)");
  }
  args.config_text = w.config;
  args.config_origin = checkpoint + " (its recorded config)";
  log::info("config: the one " + checkpoint + " records (-c CONFIG takes another)");
  return args;
}

}  // namespace

void add_eval_options(CLI::App& cmd, EvalArgs& a) {
  cmd.add_option("--config,-c", a.start.config,
                 "TOML config file: data.root, data.image_size, device, ... (default: the checkpoint's run folder's "
                 "config, else the one the checkpoint records)");
  cmd.add_option("--checkpoint", a.checkpoint,
                 "a pinfeed checkpoint (last.pt, best.pt) or a file of torch.save(model.state_dict())")
      ->required();
  cmd.add_option("--split", a.split, "val | train: data.val_split or data.train_split, with the validation transform")
      ->check(one_of({"val", "train"}));
  add_device_options(cmd, a.start);
  cmd.add_flag("--json", a.json, "print the result as one JSON object");
  cmd.add_option("overrides", a.start.overrides, "section.key=value config overrides");
}

int run_eval(const EvalArgs& a, const engine::StopRequest& stop) {
  const Plan plan = start(with_checkpoint_config(a.start, a.checkpoint), PlanUse::kEval);
  engine::Distributed dist(plan.dist_env, plan.device, name_of(plan.backend), plan.dist.timeout());
  return dist.guard([&] {
    configure_backend(plan);
    // Rank 0 reads the file; the others get what it says here and the weights by broadcast.
    std::optional<engine::Weights> weights;
    if (dist.is_main()) weights = engine::load_weights(a.checkpoint);
    const auto facts =
        nlohmann::json::parse(dist.share("eval_model", weights ? model_facts(*weights, a.checkpoint).dump() : ""));
    const int64_t num_classes = facts.at("num_classes").get<int64_t>();
    const auto classes = facts.at("classes").get<std::vector<std::string>>();

    const std::string split = a.split == "train" ? plan.dataset.train_split : plan.dataset.val_split;
    // Labels follow the checkpoint's class names when it has them (a subset of its classes may be evaluated);
    // else the split's own folders, sorted (as torchvision's ImageFolder on that split), which must then be as
    // many as the model's outputs: label i would otherwise not be the class the model calls i.
    data::ImageFolder folder = data::scan_image_folder(plan.dataset.root, split, classes.empty() ? nullptr : &classes);
    const auto folders = static_cast<int64_t>(folder.classes.size());
    if (folders > num_classes || (classes.empty() && folders != num_classes)) {
      throw ConfigError(folder.root + " has " + std::to_string(folders) + " class folders but " + a.checkpoint +
                        " classifies " + std::to_string(num_classes) +
                        (classes.empty() ? " and names none (a state dict): its labels would not be these folders'"
                                         : ": not weights for this data"));
    }
    const auto named = static_cast<int64_t>(classes.size());
    if (!classes.empty() && num_classes > named && !plan.model.allow_extra_classes) {  // outputs no label trained
      throw ConfigError(a.checkpoint + " has " + std::to_string(num_classes) + " outputs but names " +
                        std::to_string(named) + " classes (trained with a model.num_classes above its folders' count): " +
                        "its top-1 would rank outputs no class stands for; give model.allow_extra_classes=true to " +
                        "evaluate it as it is");
    }
    const std::string root = folder.root;
    const data::TransformOptions transform = eval_transform(plan, facts.at("validated"), a.checkpoint, dist.is_main());
    auto set = std::make_shared<data::Dataset>(std::move(folder), transform, /*train=*/false, plan.dataset.on_bad_image);
    data::LoaderOptions loader = plan.val_loader;
    loader.stop_requested = engine::stop_after_grace(stop);
    pipeline::Feeder feed(set, loader, plan.pipeline, plan.feeder);
    // The network the weights were trained as: model.blurpool is the checkpoint's (a state dict: the config's).
    engine::StepOptions step = plan.step;
    if (!facts.at("blurpool").is_null() && facts.at("blurpool").get<bool>() != step.net.blurpool) {
      step.net.blurpool = facts.at("blurpool").get<bool>();
      if (dist.is_main()) {
        log::warn(std::string("model.blurpool = ") + (step.net.blurpool ? "true" : "false") + ", as " + a.checkpoint +
                  " was trained (" + location_of(plan, "model.blurpool") + " says otherwise)");
      }
    }
    step.net.arch = model::spec_of(facts.at("arch").get<std::string>()).arch;  // the weights', whatever model.arch says
    engine::StepRunner runner(step, num_classes, &dist);
    if (weights) copy_weights(runner.model(), weights->model, a.checkpoint);
    runner.broadcast_state();

    engine::training_started();  // from here the first Ctrl-C ends the evaluation at the next batch
    Progress progress(plan.run.progress_interval_s);
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t batches = feed.batches_per_epoch();
    const EvalResult r = evaluate(runner, feed, &dist, &stop, /*ema=*/false, [&](int64_t done, int64_t samples) {
      if (!dist.is_main() || (done > 1 && !progress.due())) return;  // the first says it has started
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      progress.show("eval: batch " + std::to_string(done) + "/" + std::to_string(batches) + " | " +
                    common::fmt_ms(samples / s) + " images/s | ETA " + eta_text(s / done * (batches - done)));
    });
    progress.end();
    if (const int64_t bad = set->distinct_bad_images(); bad > 0) {
      log::warn(common::count_of(bad, "bad image") + " found and replaced by other samples (data.on_bad_image = \"skip\")");
    }
    if (dist.any(stop.requested())) {
      if (dist.is_main()) log::warn("interrupted: no result");
      return static_cast<int>(engine::kExitInterrupted);
    }
    if (!dist.is_main()) return static_cast<int>(engine::kExitOk);
    const int side = data::side_of(transform, /*train=*/false, 0);
    if (a.json) {
      const nlohmann::json doc = {{"checkpoint", a.checkpoint}, {"split", root},     {"images", r.samples},
                                  {"top1", common::num_or_null(r.top1)}, {"top5", common::num_or_null(r.top5)},
                                  {"loss", common::num_or_null(r.loss)}, {"world_size", dist.world()},
                                  {"image_size", side}};
      std::printf("%s\n", doc.dump().c_str());
    } else {
      std::printf("eval: top1 %.4f top5 %.4f loss %.4f on %lld images of %s at %d px (%s)\n", r.top1, r.top5, r.loss,
                  static_cast<long long>(r.samples), root.c_str(), side, a.checkpoint.c_str());
    }
    return static_cast<int>(engine::kExitOk);
  });
}

}  // namespace pinfeed::app

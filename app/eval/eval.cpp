#include "app/eval/eval.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <optional>

#include "app/config/exit_codes.h"
#include "app/config/format.h"
#include "app/dist/distributed.h"
#include "app/run/checkpoint.h"
#include "app/step/step_runner.h"
#include "app/train/evaluate.h"
#include "app/train/resume.h"
#include "common/log.h"
#include "data/dataset/image_folder.h"
#include "pipeline/transfer/feeder.h"

namespace pinfeed::app {
namespace {

// The classifier's number of outputs: fc.weight's rows.
int64_t classes_of(const Weights& w, const std::string& path) {
  const auto fc = w.model.find("fc.weight");
  if (fc == w.model.end() || fc->second.dim() != 2) {
    throw ConfigError(path + ": not the weights of a ResNet-50: it has no 2-D fc.weight");
  }
  return fc->second.size(0);
}

}  // namespace

void add_eval_options(CLI::App& cmd, EvalArgs& a) {
  cmd.add_option("--config,-c", a.start.config, "TOML config file: data.root, data.image_size, device, ...")->required();
  cmd.add_option("--checkpoint", a.checkpoint,
                 "a pinfeed checkpoint (last.pt, best.pt) or a file of torch.save(model.state_dict())")
      ->required();
  cmd.add_option("--split", a.split, "val | train: data.val_split or data.train_split, with the validation transform")
      ->check(CLI::IsMember({"val", "train"}));
  add_device_options(cmd, a.start);
  cmd.add_flag("--json", a.json, "print the result as one JSON object");
  cmd.add_option("overrides", a.start.overrides, "section.key=value config overrides");
}

int run_eval(const EvalArgs& a, const StopRequest& stop) {
  const Plan plan = start(a.start);
  Distributed dist(plan.dist_env, plan.device, name_of(plan.backend), plan.dist.timeout());
  return dist.guard([&] {
    configure_backend(plan);
    // Rank 0 reads the file; the others get the class count and names here and the weights by broadcast.
    std::optional<Weights> weights;
    if (dist.is_main()) weights = load_weights(a.checkpoint);
    const auto shared = nlohmann::json::parse(dist.share(
        "eval_model", weights ? nlohmann::json{{"num_classes", classes_of(*weights, a.checkpoint)},
                                               {"classes", weights->classes}}.dump()
                              : ""));
    const int64_t num_classes = shared.at("num_classes").get<int64_t>();
    const auto classes = shared.at("classes").get<std::vector<std::string>>();

    const std::string split = a.split == "train" ? plan.dataset.train_split : plan.dataset.val_split;
    // Labels follow the checkpoint's class names when it has them; else the split's own folders, sorted (as
    // torchvision's ImageFolder on that split).
    data::ImageFolder folder = data::scan_image_folder(plan.dataset.root, split, classes.empty() ? nullptr : &classes);
    if (static_cast<int64_t>(folder.classes.size()) > num_classes) {
      throw ConfigError(folder.root + " has " + std::to_string(folder.classes.size()) + " class folders but " +
                        a.checkpoint + " classifies " + std::to_string(num_classes) + ": not weights for this data");
    }
    const std::string root = folder.root;
    auto set = std::make_shared<data::Dataset>(std::move(folder), plan.transform, /*train=*/false, plan.dataset.on_bad_image);
    data::LoaderOptions loader = plan.val_loader;
    loader.stop_requested = stop_after_grace(stop);
    pipeline::Feeder feed(set, loader, plan.pipeline, plan.feeder);
    StepRunner runner(plan.step, num_classes, &dist);
    if (weights) copy_weights(runner.model(), weights->model, a.checkpoint);
    runner.broadcast_state();

    training_started();  // from here the first Ctrl-C ends the evaluation at the next batch
    const EvalResult r = evaluate(runner, feed, &dist, &stop);
    if (const int64_t bad = set->distinct_bad_images(); bad > 0) {
      log::warn(count_of(bad, "bad image") + " found and replaced by other samples (data.on_bad_image = \"skip\")");
    }
    if (dist.any(stop.requested())) {
      if (dist.is_main()) log::warn("interrupted: no result");
      return static_cast<int>(kExitInterrupted);
    }
    if (!dist.is_main()) return static_cast<int>(kExitOk);
    if (a.json) {
      const nlohmann::json doc = {{"checkpoint", a.checkpoint}, {"split", root},     {"images", r.samples},
                                  {"top1", num_or_null(r.top1)}, {"top5", num_or_null(r.top5)},
                                  {"loss", num_or_null(r.loss)}, {"world_size", dist.world()}};
      std::printf("%s\n", doc.dump().c_str());
    } else {
      std::printf("eval: top1 %.4f top5 %.4f loss %.4f on %lld images of %s (%s)\n", r.top1, r.top5, r.loss,
                  static_cast<long long>(r.samples), root.c_str(), a.checkpoint.c_str());
    }
    return static_cast<int>(kExitOk);
  });
}

}  // namespace pinfeed::app

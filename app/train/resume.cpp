#include "app/train/resume.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <utility>

#include "app/run/run_files.h"
#include "app/run/run_record.h"
#include "common/log.h"

namespace pinfeed::app {

engine::Checkpoint make_checkpoint(engine::StepRunner& runner, const Config& c, int64_t epoch, int64_t step_in_epoch,
                           int64_t global_step, const RunShape& shape) {
  engine::Checkpoint ck;
  for (const auto& item : runner.model()->named_parameters()) ck.model[item.key()] = item.value();
  for (const auto& item : runner.model()->named_buffers()) ck.model[item.key()] = item.value();
  ck.optimizer = runner.optimizer().state();
  ck.optimizer_name = name_of(runner.optimizer_kind());
  if (const engine::LossScaler* scaler = runner.loss_scaler()) ck.loss_scaler = scaler->state();
  if (const engine::WeightEma* ema = runner.ema()) {
    ck.model_ema = ema->state();
    ck.ema_updates = ema->updates();
  }
  ck.epoch = epoch;
  ck.step_in_epoch = step_in_epoch;
  ck.global_step = global_step;
  ck.world_size = shape.world_size;
  ck.batch_size = shape.batch_size;
  ck.train_images = shape.train_images;
  ck.steps_per_epoch = shape.steps_per_epoch;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  ck.torch_rng = generator.get_state();
  ck.config = to_toml(c);
  return ck;
}

WeightsNetwork network_of(const std::map<std::string, at::Tensor>& weights, const std::string& path) {
  const auto fc = weights.find("fc.weight");
  const std::optional<model::Arch> arch = model::arch_of_weights(weights);
  if (fc == weights.end() || fc->second.dim() != 2 || !arch) {
    throw ConfigError(path + ": not the weights of a torchvision ResNet (resnet18 ... resnext101_32x8d): " +
                      (arch ? "it has no 2-D fc.weight" : "its layers match none of model.arch's networks"));
  }
  return {*arch, fc->second.size(0)};
}

bool copy_weights(model::ResNet& model, const std::map<std::string, at::Tensor>& weights, const std::string& path,
                  bool fc_may_differ) {
  at::NoGradGuard no_grad;
  const std::string what = path + ": not the weights of this " + std::string(model::spec_of(model->arch()).name);
  std::map<std::string, at::Tensor> targets;
  for (auto& item : model->named_parameters()) targets[item.key()] = item.value();
  for (auto& item : model->named_buffers()) targets[item.key()] = item.value();
  for (const auto& [name, t] : weights) {
    if (!targets.count(name)) throw ConfigError(what + ": it has " + name + ", which the model has not");
  }
  const auto fc = weights.find("fc.weight");
  const bool new_fc = fc_may_differ && fc != weights.end() && fc->second.dim() == 2 &&
                      fc->second.size(0) != targets.at("fc.weight").size(0) &&
                      fc->second.size(1) == targets.at("fc.weight").size(1);
  for (auto& [name, t] : targets) {
    const auto it = weights.find(name);
    if (it == weights.end()) throw ConfigError(what + ": it lacks " + name);
    if (new_fc && (name == "fc.weight" || name == "fc.bias")) continue;
    if (it->second.sizes() != t.sizes()) {
      throw ConfigError(what + ": " + name + " has shape " + c10::str(it->second.sizes()) + ", the model's is " +
                        c10::str(t.sizes()));
    }
    t.copy_(it->second);
  }
  return new_fc;
}

void init_weights_from(engine::StepRunner& runner, const std::string& path) {
  const engine::Weights w = engine::load_weights(path);
  const int64_t classes = runner.model()->fc->weight.size(0);
  const bool new_fc = copy_weights(runner.model(), w.model, "train.init_from: " + path, /*fc_may_differ=*/true);
  if (engine::WeightEma* ema = runner.ema()) ema->copy_model();
  log::info("train.init_from: starting from the weights of " + path +
            (w.checkpoint ? " (a pinfeed checkpoint; not its optimizer state or position)" : " (a state dict)") +
            (new_fc ? "; it has " + std::to_string(w.model.at("fc.weight").size(0)) + " classes, this run " +
                          std::to_string(classes) + ": fc is freshly initialised"
                    : ""));
}

void restore_checkpoint(engine::StepRunner& runner, const engine::Checkpoint& ck) {
  const std::string run_optimizer = name_of(runner.optimizer_kind());
  if (ck.optimizer_name != run_optimizer) {
    throw ConfigError("--resume: the checkpoint was trained with train.optimizer = \"" + ck.optimizer_name +
                      "\", this run has \"" + run_optimizer + "\": its state would not carry over; resume with "
                      "train.optimizer=\"" + ck.optimizer_name + "\", or start a new run from its weights with train.init_from");
  }
  // best.pt whose best was the EMA's holds the EMA's weights in `model`: training goes on from the raw ones.
  copy_weights(runner.model(), ck.model_raw.empty() ? ck.model : ck.model_raw, "--resume: the checkpoint");
  // The names are the network's now: state missing for one of them is damage, not a name the network has not.
  engine::check_optimizer_covers_model(ck, ck.path);
  runner.optimizer().load_state(ck.optimizer);
  if (engine::WeightEma* ema = runner.ema()) {
    if (ck.model_ema.empty()) {
      ema->copy_model();  // its first update then copies the model again, as a new EMA's does
      log::warn("--resume: the checkpoint has no EMA of the weights (trained without train.ema): the EMA starts "
                "from its weights now");
    } else {
      copy_weights(runner.ema_model(), ck.model_ema, "--resume: the checkpoint's model_ema");
      ema->set_updates(ck.ema_updates);
    }
  }
  // fp16: the scale and its growth count go on where they were. A checkpoint of a bf16 or fp32 run has none;
  // the scale then starts from train.loss_scale_init, as in a new run.
  if (engine::LossScaler* scaler = runner.loss_scaler(); scaler && !ck.loss_scaler.empty()) scaler->load_state(ck.loss_scaler);
  if (ck.torch_rng.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(ck.torch_rng);
  }
}

void check_resumable(const engine::Checkpoint& ck, const RunShape& run) {
  const std::string start = "--resume: the checkpoint was written by a run with ";
  if (ck.world_size != run.world_size) {
    throw ConfigError(start + std::to_string(ck.world_size) + " rank(s), this run has " +
                      std::to_string(run.world_size) +
                      ": each rank's shard and the step position would not match; resume with the same number "
                      "of processes");
  }
  if (ck.format_version < 2) {
    log::warn("--resume: a format-1 checkpoint does not record its batch size, dataset size and steps per epoch; "
              "they are not checked: resume with the same config and data");
    return;
  }
  if (ck.train_images != run.train_images) {
    throw ConfigError(start + std::to_string(ck.train_images) + " training images, the training folder now has " +
                      std::to_string(run.train_images) +
                      ": the shuffle and the step position would not match; resume on the same data, or start a new "
                      "run");
  }
  if (ck.batch_size != run.batch_size) {
    throw ConfigError(start + "train.batch_size = " + std::to_string(ck.batch_size) + ", this run has " +
                      std::to_string(run.batch_size) + ": the step position would not match; resume with "
                      "train.batch_size=" + std::to_string(ck.batch_size));
  }
  // The same count of images under other class names (a folder renamed or swapped) would train other labels.
  if (!ck.classes.empty() && !run.classes.empty() && ck.classes != run.classes) {
    size_t i = 0;
    while (i < ck.classes.size() && i < run.classes.size() && ck.classes[i] == run.classes[i]) ++i;
    const auto name = [](const std::vector<std::string>& c, size_t k) {
      return k < c.size() ? "'" + c[k] + "'" : std::string("none");
    };
    throw ConfigError(start + "class " + std::to_string(i) + " = " + name(ck.classes, i) +
                      ", the training folder's class " + std::to_string(i) + " is " + name(run.classes, i) +
                      ": labels would change meaning; resume on the same class folders, or start a new run");
  }
  if (ck.steps_per_epoch != run.steps_per_epoch) {
    throw ConfigError(start + std::to_string(ck.steps_per_epoch) + " steps per epoch, this run has " +
                      std::to_string(run.steps_per_epoch) +
                      ": the epoch boundaries and the learning-rate schedule would not match; resume with the same "
                      "train.max_steps_per_epoch");
  }
}

namespace {

// A run folder's checkpoint to continue from: last.pt, or best.pt where it holds a later position (written at an
// epoch that saved no last.pt, train.checkpoint_every > 1, or a kill came between the two writes).
std::string newest_checkpoint(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  const fs::path last = folder / "last.pt", best = folder / "best.pt";
  std::error_code ec;
  const bool has_last = fs::exists(last, ec), has_best = fs::exists(best, ec);
  if (!has_best) return last.string();  // a missing last.pt is named by the loader
  if (!has_last) return best.string();
  const engine::Checkpoint a = engine::load_checkpoint(last.string()), b = engine::load_checkpoint(best.string());
  const bool later = std::make_pair(b.epoch, b.step_in_epoch) > std::make_pair(a.epoch, a.step_in_epoch);
  if (later) log::warn(best.string() + " holds a later position than last.pt: resuming from it");
  return later ? best.string() : last.string();
}

}  // namespace

std::string resume_path(const std::string& run_dir, const std::string& run_name, const std::string& resume) {
  if (resume == "last") {
    const std::string run = find_last_run(run_dir, run_name);
    if (run.empty()) {
      throw ConfigError("--resume last: no run named '" + run_name + "' with a last.pt or best.pt under " + run_dir +
                        " (run.name must match exactly; or give --resume RUN_FOLDER)");
    }
    return newest_checkpoint(run);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(resume, ec)) {  // a run folder: its newest checkpoint
    if (!is_run_folder(resume)) {
      throw ConfigError("--resume " + resume + ": not a pinfeed run folder (no run.json that pinfeed wrote, nor a " +
                        "pinfeed config.toml beside its metrics); give a folder under " + run_dir + " or its last.pt");
    }
    return newest_checkpoint(resume);
  }
  // pinfeed continues a run in the folder it wrote (it appends rows there, drops those past the checkpoint and
  // removes its own temp files): a checkpoint copied elsewhere is refused before anything there is touched.
  std::string dir = std::filesystem::path(resume).parent_path().string();
  if (dir.empty()) dir = ".";
  if (!is_run_folder(dir)) {
    engine::load_checkpoint(resume);  // what is wrong with the file itself comes first: missing, a state dict, not a checkpoint
    throw ConfigError("--resume " + resume + ": " + dir + " is not a pinfeed run folder (no run.json that pinfeed " +
                      "wrote, nor a pinfeed config.toml beside its metrics): pinfeed resumes a run only in the folder it wrote; " +
                      "give the last.pt of a folder under " + run_dir + ", or start a new run");
  }
  return resume;
}

std::string run_config_of(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path given(checkpoint);
  const fs::path dir = fs::is_directory(given, ec)           ? given  // --resume RUN_FOLDER
                       : given.parent_path().empty() ? fs::path(".")
                                                     : given.parent_path();
  fs::path config = dir / "config.toml";
  for (int n = 1; fs::exists(dir / ("config.resume-" + std::to_string(n) + ".toml"), ec); ++n) {
    config = dir / ("config.resume-" + std::to_string(n) + ".toml");
  }
  if (!fs::is_regular_file(config, ec)) {
    throw ConfigError("train --resume " + checkpoint + ": " + dir.string() + " holds no config.toml of a pinfeed run; " +
                      "give the config with -c CONFIG");
  }
  log::info("config: " + config.string() + ", the run's latest (-c CONFIG takes another)");
  return config.string();
}

void warn_if_other_data(const engine::Checkpoint& ck, const std::string& path, const Config& run) {
  if (ck.config.empty()) return;
  std::string trained_on;
  try {
    trained_on = parse_config_string(ck.config, path + " (its recorded config)").dataset.root;
  } catch (const ConfigError&) {
    return;  // an older pinfeed's keys: nothing to compare
  }
  const auto absolute = [](const std::string& p) {
    std::error_code ec;
    const auto a = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
    return ec ? p : a.string();
  };
  if (absolute(trained_on) == absolute(run.dataset.root)) return;
  log::warn(location_of(run, "data.root") + ": data.root = \"" + run.dataset.root + "\", but " + path +
            " was trained on \"" + trained_on + "\": resuming on the former");
}

}  // namespace pinfeed::app

// Between a run and its checkpoint file: what the step runner's state becomes in a Checkpoint and back, and
// which file `--resume` means.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/config/config.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/step/step_runner.h"

namespace pinfeed::app {

// What a checkpoint's step position means: which samples each step of an epoch took depends on all four.
struct RunShape {
  int64_t world_size = 1;
  int64_t batch_size = 0;       // per rank
  int64_t train_images = 0;     // in the training folder
  int64_t steps_per_epoch = 0;  // per rank
  std::vector<std::string> classes;  // the training folder's class names, label i = classes[i]
};

// config: written into the checkpoint as text (to_toml).
engine::Checkpoint make_checkpoint(engine::StepRunner& runner, const Config& config, int64_t epoch, int64_t step_in_epoch,
                           int64_t global_step, const RunShape& shape);
// Refuses (ConfigError naming both values) a resume whose shape differs from the checkpoint's: it would repeat
// or skip samples and move the learning-rate schedule. A format-1 checkpoint records the world size only; the
// other three are not checked (a warning says so).
void check_resumable(const engine::Checkpoint& checkpoint, const RunShape& run);
void restore_checkpoint(engine::StepRunner& runner, const engine::Checkpoint& checkpoint);  // weights, momentum, CPU RNG
// Copies weights by name into the model: every parameter and buffer must be there with its shape, and nothing
// else. With fc_may_differ, fc's weight and bias of another number of classes are left as initialised (returns
// true then). Throws ConfigError naming `path` and the first name at fault.
bool copy_weights(model::ResNet& model, const std::map<std::string, at::Tensor>& weights, const std::string& path,
                  bool fc_may_differ = false);
// The network a state dict holds (torchvision's names: model::arch_of_weights) and its fc's outputs, for eval and
// predict to build. Throws ConfigError naming `path` when it is none of model.arch's networks.
struct WeightsNetwork {
  model::Arch arch;
  int64_t num_classes;
};
WeightsNetwork network_of(const std::map<std::string, at::Tensor>& weights, const std::string& path);
// train.init_from: the weights of a checkpoint or a state dict into a new run (not its momentum, position or
// RNG); another number of classes leaves fc freshly initialised and says so in one line.
void init_weights_from(engine::StepRunner& runner, const std::string& path);
// "last" -> the newest run under run_dir (run.dir) started with run_name (run.name) exactly that holds a last.pt
// or best.pt; a run folder -> its checkpoint of the later position (last.pt, or best.pt where it is ahead);
// anything else is a checkpoint file, whose folder must be a pinfeed run folder (is_run_folder). Throws ConfigError.
std::string resume_path(const std::string& run_dir, const std::string& run_name, const std::string& resume);
// `pinfeed train --resume PATH` without --config: the config the run's latest start wrote beside PATH (in PATH
// when it is a run folder)
// (config.resume-N.toml with the highest N, else config.toml). Throws ConfigError when there is none.
std::string run_config_of(const std::string& checkpoint);
// One warning when the run resumes on another data.root than the checkpoint's recorded config names (both as
// written, made absolute from here): the sample counts may match while the images differ.
void warn_if_other_data(const engine::Checkpoint& checkpoint, const std::string& path, const Config& run);

}  // namespace pinfeed::app

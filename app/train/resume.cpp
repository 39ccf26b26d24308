#include "app/train/resume.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <stdexcept>

#include "app/run/run_files.h"
#include "common/log.h"

namespace pinfeed::app {

Checkpoint make_checkpoint(StepRunner& runner, const Config& c, int64_t epoch, int64_t step_in_epoch,
                           int64_t global_step, const RunShape& shape) {
  Checkpoint ck;
  for (const auto& item : runner.model()->named_parameters()) ck.model[item.key()] = item.value();
  for (const auto& item : runner.model()->named_buffers()) ck.model[item.key()] = item.value();
  ck.optimizer = runner.optimizer().state();
  if (const LossScaler* scaler = runner.loss_scaler()) ck.loss_scaler = scaler->state();
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

void restore_checkpoint(StepRunner& runner, const Checkpoint& ck) {
  at::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, at::Tensor& t) {
    auto it = ck.model.find(name);
    if (it == ck.model.end()) throw std::runtime_error("checkpoint lacks " + name);
    if (it->second.sizes() != t.sizes()) throw std::runtime_error("checkpoint shape mismatch for " + name);
    t.copy_(it->second);
  };
  for (auto& item : runner.model()->named_parameters()) restore(item.key(), item.value());
  for (auto& item : runner.model()->named_buffers()) restore(item.key(), item.value());
  runner.optimizer().load_state(ck.optimizer);
  // fp16: the scale and its growth count go on where they were. A checkpoint of a bf16 or fp32 run has none;
  // the scale then starts from train.loss_scale_init, as in a new run.
  if (LossScaler* scaler = runner.loss_scaler(); scaler && !ck.loss_scaler.empty()) scaler->load_state(ck.loss_scaler);
  if (ck.torch_rng.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(ck.torch_rng);
  }
}

void check_resumable(const Checkpoint& ck, const RunShape& run) {
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
  if (ck.steps_per_epoch != run.steps_per_epoch) {
    throw ConfigError(start + std::to_string(ck.steps_per_epoch) + " steps per epoch, this run has " +
                      std::to_string(run.steps_per_epoch) +
                      ": the epoch boundaries and the learning-rate schedule would not match; resume with the same "
                      "train.max_steps_per_epoch");
  }
}

std::string resume_path(const Config& c, const std::string& resume) {
  if (resume != "last") return resume;
  const std::string run = find_last_run(c.run.dir, c.run.name);
  if (run.empty()) {
    throw ConfigError("--resume last: no run named '" + c.run.name + "' with a last.pt under " + c.run.dir);
  }
  return (std::filesystem::path(run) / "last.pt").string();
}

}  // namespace pinfeed::app

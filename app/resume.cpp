#include "app/resume.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <stdexcept>

#include "app/run_files.h"

namespace pinfeed::app {

Checkpoint make_checkpoint(StepRunner& runner, const Config& c, int64_t epoch, int64_t step_in_epoch,
                           int64_t global_step, int64_t world_size) {
  Checkpoint ck;
  for (const auto& item : runner.model()->named_parameters()) ck.model[item.key()] = item.value();
  for (const auto& item : runner.model()->named_buffers()) ck.model[item.key()] = item.value();
  ck.optimizer = runner.optimizer().state();
  ck.epoch = epoch;
  ck.step_in_epoch = step_in_epoch;
  ck.global_step = global_step;
  ck.world_size = world_size;
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
  if (ck.torch_rng.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(ck.torch_rng);
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

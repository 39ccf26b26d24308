#include "app/plan/start.h"

#include <CLI/CLI.hpp>

#include <stdlib.h>

#include "engine/dist/distributed.h"
#include "engine/signals.h"
#include "gpu/gpu.h"

namespace pinfeed::app {
namespace {

std::vector<std::string> overrides_of(const StartArgs& a) {
  std::vector<std::string> overrides = a.overrides;
  if (!a.mode.empty()) overrides.push_back("pipeline.mode=\"" + a.mode + "\"");
  if (!a.device.empty()) overrides.push_back("train.device=\"" + a.device + "\"");
  if (!a.decoder.empty()) overrides.push_back("data.decoder=\"" + a.decoder + "\"");
  return overrides;
}

}  // namespace

void add_device_options(CLI::App& command, StartArgs& args) {
  // Checked as their keys are (with their "did you mean"), not here.
  command.add_option("--device", args.device,
                     "auto | cpu | cuda | cuda:N (same as train.device=...; default: the config's, whose own is auto)");
  command.add_option("--decoder", args.decoder,
                     "cpu | nvjpeg | auto (same as data.decoder=...; default: the config's, whose own is auto)");
}

Plan start(const StartArgs& args, PlanUse use) {
  engine::install_signal_handlers();
  const Config config = args.config.empty() && !args.config_text.empty()
                            ? parse_config_string(args.config_text, args.config_origin, overrides_of(args))
                            : load_config(args.config, overrides_of(args));
  set_cuda_environment(config);  // resolve_plan's device checks initialise CUDA
  const Plan plan = resolve_plan(config, engine::dist_env_from_environment(), use);
  use_plan_device(plan);
  return plan;
}

void set_cuda_environment(const Config& c) {
  // nvJPEG's streams must not share a hardware queue with the compute stream (docs/gpu-decode.md). CUDA reads
  // this once, as it initialises: before resolve_plan asks for devices; a value already set is kept.
  if (may_decode_on_gpu(c)) ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
}

void use_plan_device(const Plan& plan) {
  if (plan.device.is_cuda()) gpu::set_device(plan.device.index());
}

}  // namespace pinfeed::app

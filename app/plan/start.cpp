#include "app/plan/start.h"

#include <CLI/CLI.hpp>

#include <stdlib.h>

#include "app/dist/distributed.h"
#include "app/run/signals.h"
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

void add_decoder_option(CLI::App& command, std::string& decoder) {
  command.add_option("--decoder", decoder, "cpu | nvjpeg | auto (same as data.decoder=...)")
      ->check(CLI::IsMember(kDecoders));
}

Plan start(const StartArgs& args) {
  install_signal_handlers();
  const Config config = load_config(args.config, overrides_of(args));
  set_cuda_environment(config);  // resolve_plan's device checks initialise CUDA
  const Plan plan = resolve_plan(config, dist_env_from_environment());
  use_plan_device(plan);
  return plan;
}

void set_cuda_environment(const Config& c) {
  // nvJPEG's batched hardware decode issues its work on ~28 streams of its own. CUDA maps streams onto
  // CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default), so some of them shared a queue with the compute
  // stream and each of their per-image steps waited behind the kernels queued there: with a CUDA graph the
  // decode fell behind the step (83% of gpu_resident on the H200 machine, 92% with 32 queues; eager steps
  // unchanged). CUDA reads it once, when it initialises (a value set after the first device query was ignored
  // there), so before resolve_plan asks for devices; a value already set is kept.
  if (c.data.decoder != "cpu" && c.train.device != "cpu") ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
}

void use_plan_device(const Plan& plan) {
  if (plan.device.is_cuda()) gpu::set_device(plan.device.index());
}

}  // namespace pinfeed::app

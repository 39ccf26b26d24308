// How `pinfeed train` and `pinfeed bench` start: the same config flags and the same steps in the same order, up
// to the plan this process runs and the process set up for it.
#pragma once

#include <string>
#include <vector>

#include "app/config/config.h"
#include "app/plan/plan.h"

namespace CLI {
class App;
}

namespace pinfeed::app {

// What the command line says about the config. The flags that stand for a key are applied after the positional
// overrides, so a flag wins over the same key given as section.key=value.
struct StartArgs {
  std::string config;                  // --config: the TOML file
  std::string config_text;             // without a file: a config's text (a checkpoint's recorded one)...
  std::string config_origin;           // ...and what messages call it
  std::vector<std::string> overrides;  // section.key=value, TOML value syntax
  std::string mode;                    // --mode (train): pipeline.mode, if given
  std::string device;                  // --device: train.device, if given
  std::string decoder;                 // --decoder: data.decoder, if given
};

// --device and --decoder, spelt and checked alike on every command that trains or evaluates (train, bench, eval).
void add_device_options(CLI::App& command, StartArgs& args);

// Ctrl-C handling (signals.h), the config read with its overrides, set_cuda_environment, this process's place
// among the ranks, the plan resolved for it (for `use`), use_plan_device. Throws ConfigError.
Plan start(const StartArgs& args, PlanUse use = PlanUse::kTrain);

// What a run sets in the process, kept out of resolve_plan so that resolving a plan only reads and checks (tests
// resolve many plans in one process). start() calls both, in this order around resolve_plan.
//
// The environment CUDA reads when it initialises: before the first device query, that is before resolve_plan.
void set_cuda_environment(const Config& config);
// The plan's device made the current CUDA device of the process (cuda:LOCAL_RANK with several ranks per host).
void use_plan_device(const Plan& plan);

}  // namespace pinfeed::app

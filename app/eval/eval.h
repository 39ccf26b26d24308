// pinfeed eval: top-1, top-5 and mean loss of a pinfeed checkpoint or a torchvision state dict on one split of the
// ImageFolder, on any device and on several ranks under torchrun as train runs. The evaluation itself is the one
// train runs after each epoch (app/train/evaluate.h); this file only sets it up.
#pragma once

#include <string>

#include "app/plan/start.h"
#include "engine/signals.h"

namespace CLI {
class App;
}

namespace pinfeed::app {

struct EvalArgs {
  StartArgs start;            // --config, --device, --decoder and the overrides, as `pinfeed train` takes them
  std::string checkpoint;     // --checkpoint: a pinfeed checkpoint or a state dict
  std::string split = "val";  // val | train: data.val_split or data.train_split, with the validation transform
  bool json = false;          // --json: the result as one JSON object instead of the one-line summary
};

void add_eval_options(CLI::App& command, EvalArgs& args);
// Exit code; throws ConfigError, DataError as train does. Once `stop` is requested the evaluation ends without
// a result (exit 130).
int run_eval(const EvalArgs& args, const engine::StopRequest& stop);

}  // namespace pinfeed::app

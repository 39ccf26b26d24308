// pinfeed bench: every transfer mode on the same data in the same order, plus two framing rows:
// gpu_resident (the model stepping on a batch already on the GPU: the compute ceiling) and loader_only
// (the CPU pipeline with no model: the feed ceiling). Training rows augment their batches as the config says
// (--augment-ab adds each one without). Every row runs the training step loop (step_loop.h);
// warm-up excluded, repeats interleaved, CUDA-event timing.
#pragma once

#include <string>
#include <vector>

#include "app/plan/start.h"
#include "engine/signals.h"

namespace CLI {
class App;
}

namespace pinfeed::app {

struct BenchArgs {
  StartArgs start;  // --config, --decoder and the overrides, as `pinfeed train` takes them
  std::vector<std::string> modes;  // empty: all presets + gpu_resident + loader_only
  int repeats = 3;
  int warmup = 20;
  int steps = 100;
  std::string out;        // output folder; default runs/bench-<timestamp>
  std::string reference;  // --reference files (scripts/reference_pytorch.py, reference_dali.py), one per line
  std::string trace_steps;  // "A-B": a trace of timed steps A-B of each row's first repeat, trace.<row>.json
  // Each transfer-mode row also runs without the config's augmentations (data.auto_augment, data.random_erasing,
  // data.mixup_alpha, data.cutmix_alpha), as <mode>-no_augment, interleaved with it: their cost in one call.
  bool augment_ab = false;
};

void add_bench_options(CLI::App& command, BenchArgs& args);
// Exit code. Once `stop` is requested (main hands it signal_stop(), signals.h), the rows in progress end and the
// table of the repeats done is still written.
int run_bench(const BenchArgs& args, const engine::StopRequest& stop);

}  // namespace pinfeed::app

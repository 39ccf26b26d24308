// pinfeed bench: every transfer mode on the same data in the same order, plus two framing rows:
// gpu_resident (the model stepping on a batch already on the GPU: the compute ceiling) and loader_only
// (the CPU pipeline with no model: the feed ceiling). Every row runs the training step loop (step_loop.h);
// warm-up excluded, repeats interleaved, CUDA-event timing.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pinfeed::app {

struct BenchArgs {
  std::string config;
  std::vector<std::string> modes;  // empty: all presets + gpu_resident + loader_only
  int repeats = 3;
  int warmup = 20;
  int steps = 100;
  std::string out;        // output folder; default runs/bench-<timestamp>
  std::string reference;  // --reference files (scripts/reference_pytorch.py, reference_dali.py), one per line
  std::string decoder;    // data.decoder, if given
  std::string trace_steps;  // "A-B": a trace of timed steps A-B of each row's first repeat, trace.<row>.json
  std::vector<std::string> overrides;
};

void add_bench_options(CLI::App& command, BenchArgs& args);
int run_bench(const BenchArgs& args);  // exit code

}  // namespace pinfeed::app

// A trace of chosen steps of the step loop (run.trace_steps, bench --trace-steps) in Chrome trace JSON, for
// https://ui.perfetto.dev or chrome://tracing. Recorded by LibTorch's own profiler, Kineto, which the torch
// wheel compiles into libtorch_cpu with CUPTI: every kernel, memcpy and memset of the device, on every stream,
// timed by CUPTI and so independent of the StepMeter's CUDA events; and the training thread's ranges
// pinfeed::ahead (StepMeter::hold_back), pinfeed::wait (BatchSource::next) and pinfeed::step (the step).
// The StepMeter's own figures for the same steps go into the file under "pinfeed", so that
// scripts/trace_idle.py can set the GPU idle it computes from the kernels beside them.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "pipeline/timing/step_meter.h"

namespace pinfeed::engine {

// Consecutive step numbers, both ends included: run.trace_steps, bench --trace-steps.
struct StepRange {
  int64_t first = 0, last = 0;
  int64_t size() const { return last - first + 1; }
  std::string text() const { return std::to_string(first) + "-" + std::to_string(last); }
};

class StepTrace {
 public:
  // about: what ran ({"command": "bench", "row": ...}), written under "pinfeed" with the figures. Plain words
  // only: Kineto's writer turns a backslash into '/', which would break an escaped string.
  StepTrace(StepRange steps, std::string path, c10::Device device, nlohmann::json about = nlohmann::json::object());
  ~StepTrace();  // a trace still recording (an exception unwinding the loop) is stopped and dropped
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  // The step loop calls these around its step number `index`, numbered as `steps` are: recording starts before
  // the first step of the range (before its hold-back and its wait) and stops after its last one, then the file
  // is written. Stopping synchronises the compute stream (the traced kernels must have run before CUPTI's
  // buffers are read), so the steps after it start on an idle GPU.
  void before_step(int64_t index, pipeline::StepMeter& meter);
  void after_step(int64_t index, pipeline::StepMeter& meter);
  // The loop ended (Ctrl-C, or a bench row shorter than the range): a trace still recording is written with
  // the steps it has.
  void end_loop(pipeline::StepMeter& meter);

  const StepRange& steps() const { return steps_; }
  const std::string& path() const { return path_; }
  bool written() const { return written_; }

 private:
  void start(int64_t index, pipeline::StepMeter& meter);
  void stop(pipeline::StepMeter& meter);

  StepRange steps_;
  std::string path_;
  c10::Device device_;
  nlohmann::json about_;
  bool recording_ = false, written_ = false;
  int64_t first_traced_ = -1, last_traced_ = -1;
};

}  // namespace pinfeed::engine

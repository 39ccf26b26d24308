// Per-step and per-epoch figures: wait, host-to-device copy, compute, GPU idle fraction, samples/s.
// CUDA events are read a few steps late (when query() says they are done), so measuring never adds a
// synchronisation to the step; the only synchronisations are at the end of warm-up and of the epoch.
#pragma once

#include <c10/core/Stream.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "gpu/gpu.h"

namespace pinfeed::pipeline {

constexpr double kNotApplicable = std::numeric_limits<double>::quiet_NaN();

struct Span {
  double begin_ms = 0, end_ms = 0;
};

// 1 - (sum of compute spans) / (last end - first begin). Spans are in stream order; NaN if none.
double idle_fraction(const std::vector<Span>& spans);

struct Summary {
  double mean = kNotApplicable, p50 = kNotApplicable, p95 = kNotApplicable;
};
Summary summarize(std::vector<double> values);  // NaN entries are ignored

// What one batch cost the training thread in Feeder::next(), and its copy's span on the GPU.
struct FeedTiming {
  double wait_ms = 0;    // host time blocked in next(): loader hand-off, issuing the copy, any synchronous copy
  double loader_ms = 0;  // of which blocked because the input pipeline had no batch ready (loader, or copier)
  std::shared_ptr<gpu::Event> h2d_begin, h2d_end;  // null on the CPU
};

struct StepRecord {
  int64_t step = 0;  // within the epoch
  int64_t samples = 0;
  bool warmup = false;
  double wait_ms = 0;
  double loader_ms = 0;
  double ahead_ms = kNotApplicable;  // host blocked before the step because it was max_ahead steps ahead of the GPU
  double h2d_ms = kNotApplicable;
  double compute_ms = kNotApplicable;
};

struct EpochTiming {
  int64_t steps = 0, warmup_steps = 0, samples = 0;  // steps and samples measured (after warm-up)
  double seconds = 0;                                // synchronised wall time of the measured steps
  double samples_per_s = kNotApplicable;
  Summary wait_ms, loader_ms, ahead_ms, h2d_ms, compute_ms;
  double gpu_idle = kNotApplicable;  // fraction, 0..1
};

class StepMeter {
 public:
  // compute: the stream the step runs on (CUDA), or nullopt on the CPU (wall-clock timing).
  explicit StepMeter(std::optional<c10::Stream> compute);

  // first_step: the number of the epoch's first step (a resumed epoch's is not 0): records are numbered on from it.
  void start_epoch(int64_t warmup_steps, int64_t first_step = 0);
  // Call before fetching a step's batch. Blocks until the GPU has finished the step max_ahead steps back, so
  // that the host stays at most max_ahead steps ahead (0: no limit). Unbounded (a CUDA-graph step is one
  // launch), the host runs far ahead, device memory holds a batch per queued step, and GPU back-pressure
  // blocks whatever CUDA call comes next, the batch hand-over in Feeder::next() included, where it would be
  // counted as waiting for data. Returns the ms blocked (also in the step's record as ahead_ms).
  double hold_back(int max_ahead);
  void begin_step();  // the batch is in hand; compute starts
  void end_step(int64_t samples, const FeedTiming& feed);
  // Records whose events have completed, oldest first; with wait, all of them (synchronises).
  std::vector<StepRecord> take_resolved(bool wait = false);
  EpochTiming finish_epoch();  // synchronises; then summarises the epoch

  // The same figures for a run of consecutive steps alone (a trace's steps, engine/step/step_trace.h), warm-up steps
  // included: open_window() before the first step's hold_back(), close_window() after the last end_step()
  // (synchronises). GPU idle is over the window's own spans: first begin to last end.
  void open_window();
  EpochTiming close_window();

 private:
  struct Pending {
    StepRecord record;
    std::shared_ptr<gpu::Event> begin, end, h2d_begin, h2d_end;
  };
  void resolve(bool wait);

  std::optional<c10::Stream> compute_;
  int64_t warmup_steps_ = 0;
  int64_t step_ = 0;        // steps since start_epoch
  int64_t first_step_ = 0;  // the number of the first of them
  std::chrono::steady_clock::time_point host_begin_, measure_t0_;
  bool measuring_ = false;
  std::shared_ptr<gpu::Event> reference_;  // begin of the first measured step
  std::shared_ptr<gpu::Event> current_begin_;
  double ahead_ms_ = 0;  // this step's hold_back
  gpu::EventPool events_;
  std::deque<Pending> pending_;
  std::vector<StepRecord> resolved_, epoch_records_;
  std::vector<Span> spans_;
  // open_window(): the first step of the window (-1: none open), its begin event, its steps' records and spans.
  int64_t window_from_ = -1;
  std::shared_ptr<gpu::Event> window_reference_;
  std::vector<StepRecord> window_records_;
  std::vector<Span> window_spans_;
  std::chrono::steady_clock::time_point window_t0_;
};

}  // namespace pinfeed::pipeline

#include "pipeline/timing/step_meter.h"

#include <algorithm>
#include <cmath>

namespace pinfeed::pipeline {

double idle_fraction(const std::vector<Span>& spans) {
  if (spans.empty()) return kNotApplicable;
  double busy = 0;
  for (const auto& s : spans) busy += s.end_ms - s.begin_ms;
  const double window = spans.back().end_ms - spans.front().begin_ms;
  if (window <= 0) return 0;
  return std::clamp(1.0 - busy / window, 0.0, 1.0);
}

Summary summarize(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  auto pct = [&](double q) {  // linear interpolation between closest ranks, as numpy's default
    const double pos = q * (v.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
  };
  s.p50 = pct(0.5);
  s.p95 = pct(0.95);
  return s;
}

namespace {

// Means and percentiles of the records, samples/s over `seconds`, GPU idle over `spans` (when `gpu`).
EpochTiming timing_of(const std::vector<StepRecord>& records, const std::vector<Span>& spans, double seconds, bool gpu) {
  EpochTiming t;
  std::vector<double> wait, loader, ahead, h2d, compute;
  for (const auto& r : records) {
    ++t.steps;
    t.samples += r.samples;
    wait.push_back(r.wait_ms);
    loader.push_back(r.loader_ms);
    ahead.push_back(r.ahead_ms);
    h2d.push_back(r.h2d_ms);
    compute.push_back(r.compute_ms);
  }
  t.seconds = seconds;
  if (t.seconds > 0 && t.samples > 0) t.samples_per_s = t.samples / t.seconds;
  t.wait_ms = summarize(wait);
  t.loader_ms = summarize(loader);
  t.ahead_ms = summarize(ahead);
  t.h2d_ms = summarize(h2d);
  t.compute_ms = summarize(compute);
  if (gpu) t.gpu_idle = idle_fraction(spans);
  return t;
}

}  // namespace

StepMeter::StepMeter(std::optional<c10::Stream> compute) : compute_(compute) {}

void StepMeter::start_epoch(int64_t warmup_steps, int64_t first_step) {
  warmup_steps_ = warmup_steps;
  first_step_ = first_step;
  step_ = 0;
  measuring_ = warmup_steps == 0;
  measure_t0_ = std::chrono::steady_clock::now();
  reference_.reset();
  pending_.clear();
  resolved_.clear();
  epoch_records_.clear();
  spans_.clear();
  window_from_ = -1;  // a window ends with its epoch at the latest
  window_reference_.reset();
}

double StepMeter::hold_back(int max_ahead) {
  ahead_ms_ = 0;
  if (!compute_ || max_ahead <= 0) return 0;
  resolve(false);
  const int64_t queued = static_cast<int64_t>(pending_.size());  // steps not known to be finished
  if (queued < max_ahead) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  pending_[queued - max_ahead].end->synchronize();
  ahead_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ahead_ms_;
}

void StepMeter::begin_step() {
  host_begin_ = std::chrono::steady_clock::now();
  if (!compute_) return;
  current_begin_ = events_.get();
  current_begin_->record(*compute_);
  if (measuring_ && !reference_) reference_ = current_begin_;
}

void StepMeter::end_step(int64_t samples, const FeedTiming& feed) {
  Pending p;
  p.record.step = first_step_ + step_;
  p.record.samples = samples;
  p.record.warmup = !measuring_;
  p.record.wait_ms = feed.wait_ms;
  p.record.loader_ms = feed.loader_ms;
  p.record.ahead_ms = compute_ ? ahead_ms_ : kNotApplicable;  // no GPU to be ahead of on the CPU
  ahead_ms_ = 0;
  if (compute_) {
    p.begin = std::move(current_begin_);
    p.end = events_.get();
    p.end->record(*compute_);
    p.h2d_begin = feed.h2d_begin;
    p.h2d_end = feed.h2d_end;
  } else {
    p.record.compute_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_begin_).count();
  }
  pending_.push_back(std::move(p));
  ++step_;
  if (!measuring_ && step_ >= warmup_steps_) {  // warm-up over: start the clock on an idle device
    if (compute_) gpu::synchronize(*compute_);
    measuring_ = true;
    measure_t0_ = std::chrono::steady_clock::now();
  }
  resolve(false);
}

void StepMeter::resolve(bool wait) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (p.end) {
      if (!wait && !p.end->query()) break;
      p.end->synchronize();
      p.record.compute_ms = p.begin->elapsed_ms(*p.end);
      if (p.h2d_begin && p.h2d_end) {
        p.h2d_end->synchronize();
        p.record.h2d_ms = p.h2d_begin->elapsed_ms(*p.h2d_end);
      }
      if (!p.record.warmup && reference_) {
        spans_.push_back({reference_->elapsed_ms(*p.begin), reference_->elapsed_ms(*p.end)});
      }
      if (window_from_ >= 0 && p.record.step >= window_from_) {
        if (!window_reference_) window_reference_ = p.begin;
        window_spans_.push_back({window_reference_->elapsed_ms(*p.begin), window_reference_->elapsed_ms(*p.end)});
      }
    }
    if (window_from_ >= 0 && p.record.step >= window_from_) window_records_.push_back(p.record);
    resolved_.push_back(p.record);
    epoch_records_.push_back(p.record);
    pending_.pop_front();
  }
}

std::vector<StepRecord> StepMeter::take_resolved(bool wait) {
  resolve(wait);
  std::vector<StepRecord> out;
  out.swap(resolved_);
  return out;
}

EpochTiming StepMeter::finish_epoch() {
  if (compute_) gpu::synchronize(*compute_);
  const auto t1 = std::chrono::steady_clock::now();
  resolve(true);
  std::vector<StepRecord> measured;
  int64_t warmup = 0;
  for (const auto& r : epoch_records_) {
    if (r.warmup) ++warmup;
    else measured.push_back(r);
  }
  const double seconds = measuring_ ? std::chrono::duration<double>(t1 - measure_t0_).count() : 0;
  EpochTiming t = timing_of(measured, spans_, seconds, compute_.has_value());
  t.warmup_steps = warmup;
  return t;
}

void StepMeter::open_window() {
  window_from_ = first_step_ + step_;
  window_reference_.reset();
  window_records_.clear();
  window_spans_.clear();
  window_t0_ = std::chrono::steady_clock::now();
}

EpochTiming StepMeter::close_window() {
  if (compute_) gpu::synchronize(*compute_);
  const auto t1 = std::chrono::steady_clock::now();
  resolve(true);
  EpochTiming t = timing_of(window_records_, window_spans_, std::chrono::duration<double>(t1 - window_t0_).count(),
                            compute_.has_value());
  window_from_ = -1;
  window_reference_.reset();
  window_records_.clear();
  window_spans_.clear();
  return t;
}

}  // namespace pinfeed::pipeline

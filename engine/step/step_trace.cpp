#include "engine/step/step_trace.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>
#include <set>

#include "common/format.h"
#include "engine/files.h"
#include "common/log.h"

namespace torch::autograd::profiler {
// Declared in torch/csrc/profiler/kineto_shim.h, which the wheel ships but cannot be included without
// libkineto's own headers, which it does not ship. Exported by libtorch_cpu; Python's
// torch.autograd._add_metadata_json. Adds a top-level key to the trace being recorded (a JSON value as text).
TORCH_API void addMetadataJson(const std::string& key, const std::string& value);
}  // namespace torch::autograd::profiler

namespace pinfeed::engine {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// No input shapes, memory, stacks or FLOPs: only what runs when.
ProfilerConfig profiler_config() { return ProfilerConfig(ProfilerState::KINETO); }

std::set<ActivityType> activities(c10::Device device) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (device.is_cuda()) a.insert(ActivityType::CUDA);  // CUPTI: kernels, copies, memsets, runtime calls
  return a;
}

nlohmann::json figures(const pipeline::EpochTiming& t) {
  return {{"steps", t.steps}, {"samples", t.samples}, {"seconds", t.seconds},
          {"samples_per_s", common::num_or_null(t.samples_per_s)}, {"gpu_idle", common::num_or_null(t.gpu_idle)},
          {"wait_ms_mean", common::num_or_null(t.wait_ms.mean)}, {"loader_ms_mean", common::num_or_null(t.loader_ms.mean)},
          {"ahead_ms_mean", common::num_or_null(t.ahead_ms.mean)}, {"h2d_ms_mean", common::num_or_null(t.h2d_ms.mean)},
          {"compute_ms_mean", common::num_or_null(t.compute_ms.mean)}};
}

}  // namespace

StepTrace::StepTrace(StepRange steps, std::string path, c10::Device device, nlohmann::json about)
    : steps_(steps), path_(std::move(path)), device_(device), about_(std::move(about)) {}

StepTrace::~StepTrace() {
  if (!recording_) return;
  try {
    prof::disableProfiler();
  } catch (...) {  // already unwinding: the trace is dropped either way
  }
}

void StepTrace::before_step(int64_t index, pipeline::StepMeter& meter) {
  if (!recording_ && !written_ && index >= steps_.first && index <= steps_.last) start(index, meter);
}

void StepTrace::after_step(int64_t index, pipeline::StepMeter& meter) {
  if (!recording_) return;
  last_traced_ = index;
  if (index >= steps_.last) stop(meter);
}

void StepTrace::end_loop(pipeline::StepMeter& meter) {
  if (recording_) stop(meter);
}

void StepTrace::start(int64_t index, pipeline::StepMeter& meter) {
  const ProfilerConfig config = profiler_config();
  prof::prepareProfiler(config, activities(device_));
  // Only the user-scope ranges (pinfeed::...) on the CPU side. Recording every ATen operator would cost the
  // threads that launch kernels a microsecond or two per operator, thousands of them per step, and change the
  // step being measured. Kernels, copies and their launches come from CUPTI whatever the scopes.
  prof::enableProfiler(config, activities(device_), {at::RecordScope::USER_SCOPE});
  recording_ = true;
  first_traced_ = index;
  meter.open_window();
}

void StepTrace::stop(pipeline::StepMeter& meter) {
  // Synchronises first: every traced step's kernels have run when CUPTI's buffers are read, as Python's
  // profiler synchronises the device when it stops.
  const pipeline::EpochTiming window = meter.close_window();
  nlohmann::json meta = about_;
  meta["steps"] = {steps_.first, steps_.last};
  meta["steps_traced"] = {first_traced_, last_traced_};
  meta["device"] = device_.str();
  meta["stepmeter"] = figures(window);
  prof::addMetadataJson("pinfeed", meta.dump());
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  recording_ = false;
  std::error_code ec;
  std::filesystem::remove(path_, ec);  // so that a file seen below is this trace's
  result->save(path_);  // Kineto writes path.tmp, then renames it; it logs a failure but does not throw
  if (!std::filesystem::exists(path_, ec)) {
    throw OutputError("cannot write the trace " + path_ + " (Kineto's message above says why)");
  }
  written_ = true;
  const double mb = static_cast<double>(std::filesystem::file_size(path_, ec)) / (1 << 20);
  log::info("trace of steps " + std::to_string(first_traced_) + "-" + std::to_string(last_traced_) + " written to " +
            path_ + " (" + common::fixed(mb, 1) + " MB; open it in https://ui.perfetto.dev): StepMeter GPU idle " +
            (std::isnan(window.gpu_idle) ? std::string("n/a") : common::fixed(100 * window.gpu_idle, 2) + "%") +
            " over these steps; scripts/trace_idle.py " + path_ + " computes it from the kernels");
}

}  // namespace pinfeed::engine

#include "pipeline/transfer/options.h"

#include <unistd.h>

namespace pinfeed::pipeline {

const std::vector<ModePreset>& mode_presets() {
  static const std::vector<ModePreset> presets = {
      {Mode::kPageable, "pageable", false, false, false, "ordinary host memory, blocking copy"},
      {Mode::kPinned, "pinned", true, false, false, "page-locked memory, blocking copy"},
      {Mode::kNonBlocking, "non_blocking", false, true, false, "ordinary memory, non_blocking copy (still synchronises)"},
      {Mode::kPinnedNonBlocking, "pinned_non_blocking", true, true, false,
       "page-locked memory, async copy on the compute stream"},
      {Mode::kDualStream, "dual_stream", true, true, true,
       "page-locked memory, next batch copied on a copy stream while the current one computes"},
  };
  return presets;
}

const ModePreset* find_preset(const std::string& name) {
  for (const auto& p : mode_presets()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

const ModePreset& preset_of(Mode mode) { return mode_presets().at(static_cast<size_t>(mode)); }

std::string preset_names() {
  std::string s;
  for (const auto& p : mode_presets()) s += (s.empty() ? "" : " | ") + std::string(p.name);
  return s;
}

void apply_preset(const ModePreset& preset, PipelineOptions& o) {
  o.pin_memory = preset.pin_memory;
  o.non_blocking = preset.non_blocking;
  o.dual_stream = preset.dual_stream;
  o.mode = preset.mode;
}

std::string mode_name(const PipelineOptions& o) {
  for (const auto& p : mode_presets()) {
    if (p.pin_memory == o.pin_memory && p.non_blocking == o.non_blocking && p.dual_stream == o.dual_stream) return p.name;
  }
  return "custom";
}

OptionsProblem check_options(const PipelineOptions& o, bool device_is_cuda) {
  if (!device_is_cuda) {
    if (o.pin_memory) {
      return {"pipeline.pin_memory", "pipeline.pin_memory = true needs a CUDA device (train.device resolved to cpu)"};
    }
    if (o.non_blocking) {
      return {"pipeline.non_blocking",
              "pipeline.non_blocking = true needs a CUDA device (train.device resolved to cpu)"};
    }
    if (o.dual_stream) {
      return {"pipeline.dual_stream", "pipeline.dual_stream = true needs a CUDA device (train.device resolved to cpu)"};
    }
  }
  if (o.dual_stream && !o.pin_memory) {
    return {"pipeline.dual_stream",
            "pipeline.dual_stream = true needs pipeline.pin_memory = true: a copy from pageable memory cannot "
            "overlap with compute"};
  }
  if (o.dual_stream && !o.non_blocking) {
    return {"pipeline.dual_stream",
            "pipeline.dual_stream = true issues asynchronous copies; it needs pipeline.non_blocking = true"};
  }
  if (o.pinned_budget_mb < 0) {
    return {"pipeline.pinned_budget_mb", "pipeline.pinned_budget_mb must be >= 0 (0 means 30% of RAM)"};
  }
  return {};
}

const char* to_string(TransferDtype d) { return d == TransferDtype::kUint8 ? "uint8" : "float32"; }

int64_t default_pinned_budget_mb() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 4096;
  return static_cast<int64_t>(static_cast<double>(pages) * page * 0.3 / (1 << 20));
}

}  // namespace pinfeed::pipeline

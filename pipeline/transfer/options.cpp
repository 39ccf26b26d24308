#include "pipeline/transfer/options.h"

#include <unistd.h>

namespace pinfeed::pipeline {

const std::vector<ModePreset>& mode_presets() {
  static const std::vector<ModePreset> presets = {
      {"pageable", false, false, Prefetch::kNone, "ordinary host memory, blocking copy"},
      {"pinned", true, false, Prefetch::kNone, "page-locked memory, blocking copy"},
      {"non_blocking", false, true, Prefetch::kNone, "ordinary memory, non_blocking copy (still synchronises)"},
      {"pinned_non_blocking", true, true, Prefetch::kNone, "page-locked memory, async copy on the compute stream"},
      {"dual_stream", true, true, Prefetch::kDualStream,
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

std::string preset_names() {
  std::string s;
  for (const auto& p : mode_presets()) s += (s.empty() ? "" : " | ") + std::string(p.name);
  return s;
}

void apply_preset(const ModePreset& preset, PipelineOptions& o) {
  o.pin_memory = preset.pin_memory;
  o.non_blocking = preset.non_blocking;
  o.prefetch = preset.prefetch;
}

std::string mode_name(const PipelineOptions& o) {
  for (const auto& p : mode_presets()) {
    if (p.pin_memory == o.pin_memory && p.non_blocking == o.non_blocking && p.prefetch == o.prefetch) return p.name;
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
    if (o.prefetch != Prefetch::kNone) {
      return {"pipeline.prefetch",
              "pipeline.prefetch = \"dual_stream\" needs a CUDA device (train.device resolved to cpu)"};
    }
  }
  if (o.prefetch == Prefetch::kDualStream && !o.pin_memory) {
    return {"pipeline.prefetch",
            "pipeline.prefetch = \"dual_stream\" needs pipeline.pin_memory = true: a copy from pageable memory "
            "cannot overlap with compute"};
  }
  if (o.prefetch == Prefetch::kDualStream && !o.non_blocking) {
    return {"pipeline.prefetch",
            "pipeline.prefetch = \"dual_stream\" issues asynchronous copies; it needs pipeline.non_blocking = true"};
  }
  if (o.pinned_budget_mb < 0) {
    return {"pipeline.pinned_budget_mb", "pipeline.pinned_budget_mb must be >= 0 (0 means 30% of RAM)"};
  }
  return {};
}

const char* to_string(Prefetch p) { return p == Prefetch::kDualStream ? "dual_stream" : "none"; }
const char* to_string(TransferDtype d) { return d == TransferDtype::kUint8 ? "uint8" : "float32"; }

std::optional<Prefetch> parse_prefetch(const std::string& s) {
  if (s == "none") return Prefetch::kNone;
  if (s == "dual_stream") return Prefetch::kDualStream;
  return std::nullopt;
}

std::optional<TransferDtype> parse_transfer_dtype(const std::string& s) {
  if (s == "float32") return TransferDtype::kFloat32;
  if (s == "uint8") return TransferDtype::kUint8;
  return std::nullopt;
}

int64_t default_pinned_budget_mb() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 4096;
  return static_cast<int64_t>(static_cast<double>(pages) * page * 0.3 / (1 << 20));
}

}  // namespace pinfeed::pipeline

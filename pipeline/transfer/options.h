// How each batch crosses from host to device: the flags, the five named presets the comparison table
// compares, and which combinations can work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pinfeed::pipeline {

enum class TransferDtype { kFloat32, kUint8 };
enum class Mode { kPageable, kPinned, kNonBlocking, kPinnedNonBlocking, kDualStream };

struct PipelineOptions {
  std::optional<Mode> mode;      // the preset the three flags below were set from; nullopt: set one by one
  bool pin_memory = false;       // workers write into page-locked buffers of a fixed ring
  bool non_blocking = false;     // .to(device, non_blocking)
  bool dual_stream = false;      // a copier thread copies each batch on a copy stream of its own, ahead of compute
  TransferDtype transfer_dtype = TransferDtype::kFloat32;  // uint8: raw pixels, normalised on the device
  int64_t pinned_budget_mb = 0;  // cap on page-locked bytes; 0: 30% of physical RAM
};

struct ModePreset {
  Mode mode;
  const char* name;
  bool pin_memory;
  bool non_blocking;
  bool dual_stream;
  const char* description;
};

// pageable, pinned, non_blocking, pinned_non_blocking, dual_stream: in the table's order.
const std::vector<ModePreset>& mode_presets();
const ModePreset* find_preset(const std::string& name);
const ModePreset& preset_of(Mode mode);
std::string preset_names();  // "pageable | pinned | ..." for messages
void apply_preset(const ModePreset& preset, PipelineOptions& options);  // the flags and `mode`

// The preset these flags amount to, or "custom".
std::string mode_name(const PipelineOptions& options);

// Why a combination of flags cannot run on a device: the key at fault (the one to change) and the message.
struct OptionsProblem {
  std::string key;      // e.g. "pipeline.dual_stream"; empty when there is no problem
  std::string message;  // names the flags involved
  explicit operator bool() const { return !key.empty(); }
};

// The one place the transfer flags' rules live: none (false) when the combination can run on this device.
OptionsProblem check_options(const PipelineOptions& options, bool device_is_cuda);

const char* to_string(TransferDtype d);

int64_t default_pinned_budget_mb();  // 30% of physical RAM

}  // namespace pinfeed::pipeline

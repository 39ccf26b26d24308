// Autocast on CUDA for the forward pass, as torch.autocast("cuda", dtype=torch.bfloat16 or torch.float16).
#pragma once

#include <ATen/autocast_mode.h>

#include <optional>

namespace pinfeed::engine {

class AutocastScope {
 public:
  // dtype: bf16 or fp16; nullopt: no autocast. cache: reuse each weight's low-precision copy within the scope;
  // off under CUDA graph capture (as torch.cuda.graph requires), where a cached copy would outlive the capture.
  explicit AutocastScope(std::optional<at::ScalarType> dtype, bool cache = true) : on_(dtype.has_value()) {
    if (!on_) return;
    at::autocast::set_autocast_cache_enabled(cache);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, *dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::set_autocast_cache_enabled(true);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_;
};

}  // namespace pinfeed::engine

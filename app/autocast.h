// bf16 autocast on CUDA for the forward pass, as torch.autocast("cuda", dtype=torch.bfloat16).
#pragma once

#include <ATen/autocast_mode.h>

namespace pinfeed::app {

class AutocastScope {
 public:
  // cache: reuse each weight's bf16 copy within the scope; off under CUDA graph capture (as torch.cuda.graph
  // requires), where a cached copy would outlive the capture.
  explicit AutocastScope(bool on, bool cache = true) : on_(on) {
    if (!on_) return;
    at::autocast::set_autocast_cache_enabled(cache);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
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

}  // namespace pinfeed::app

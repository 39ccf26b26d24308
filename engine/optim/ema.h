// An exponential moving average of the weights with timm's ModelEmaV3 semantics (timm/utils/model_ema.py, as
// timm's train.py drives it): after optimizer step n (1, 2, ...) every floating parameter and buffer of the EMA
// copy moves to ema = decay(n) ema + (1 - decay(n)) model, and the other buffers (BN's num_batches_tracked) are
// copied. decay(1) = 0, so the first update makes the copy the model itself.
//
// The update is three multi-tensor kernels and one copy, reading decay(n) from a device scalar that advance()
// sets on the host before the step: a captured CUDA graph replays it with each step's own decay.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pinfeed::engine {

struct EmaOptions {
  bool enabled = false;   // train.ema
  double decay = 0.9998;  // train.ema_decay (timm train.py's --model-ema-decay default)
  bool warmup = false;    // train.ema_warmup: decay(n) = 1 - (1 + (n - 1) / gamma)^-power, within [min_decay, decay]
  double warmup_gamma = 1.0;
  double warmup_power = 2.0 / 3.0;
  double min_decay = 0.0;
};

// ModelEmaV3.get_decay(step = update), update_after_step 0: the decay of the update after optimizer step `update`.
double ema_decay(const EmaOptions& options, int64_t update);

class WeightEma {
 public:
  // ema and model: (name, tensor) pairs, the same names in the same order; the EMA starts as a copy of the model.
  WeightEma(std::vector<std::pair<std::string, at::Tensor>> ema, std::vector<std::pair<std::string, at::Tensor>> model,
            const EmaOptions& options);

  void advance();  // host: the next update's number and decay, into the device scalar apply() reads
  void apply();    // device: moves the EMA toward the model by that decay (capturable)
  void copy_model();  // the EMA becomes the model itself, no update counted yet

  int64_t updates() const { return updates_; }  // updates applied since the EMA started (resumes included)
  void set_updates(int64_t n) { updates_ = n; }
  double last_decay() const { return last_decay_; }
  // The EMA's tensors by name (the tensors themselves), and in order, floating ones first.
  std::map<std::string, at::Tensor> state() const;
  std::vector<at::Tensor> tensors() const;

 private:
  EmaOptions options_;
  std::vector<std::pair<std::string, at::Tensor>> named_;  // the EMA's tensors
  std::vector<at::Tensor> ema_float_, model_float_, ema_other_, model_other_;
  at::Tensor decay_;  // () float32 on the device
  int64_t updates_ = 0;
  double last_decay_ = 0;
};

}  // namespace pinfeed::engine

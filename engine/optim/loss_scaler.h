// Dynamic loss scaling for fp16 training, with torch.amp.GradScaler's semantics and ATen's own kernels: the
// loss is multiplied by the scale before backward, so that small gradients do not flush to zero in fp16; the
// gradients are divided by it again and checked for inf/NaN in one pass
// (_amp_foreach_non_finite_check_and_unscale_); a step whose gradients overflowed is skipped by the optimizer
// and halves the scale; growth_interval good steps in a row double it (_amp_update_scale_).
//
// Everything stays on the device (no host sync per step), so the whole step can be captured in a CUDA graph.
// With several ranks the check runs on the averaged gradients, which are the same bytes on every rank: every
// rank finds the same overflow and skips the same steps.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pinfeed::engine {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  LossScaler(c10::Device device, const LossScalerOptions& options);

  at::Tensor scale(const at::Tensor& loss) const;  // loss x scale, float32: what backward starts from
  // Divides the gradients by the scale in place and sets found_inf() to 1 if any element is inf or NaN, else 0.
  void unscale(const std::vector<at::Tensor>& grads);
  // After the optimizer: the scale backs off if found_inf(), else grows every growth_interval steps; a skipped
  // step is counted.
  void update();
  const at::Tensor& found_inf() const { return found_inf_; }  // () float32 on the device: what the optimizer skips on

  double current_scale() const;  // read on the host (waits for the device)
  int64_t skipped_steps() const;  // steps skipped for overflow since the run began (resumes included); host read

  // "scale" () float32, "growth_tracker" () int32, "skipped_steps" () float64: for checkpoints and broadcasts.
  // The tensors themselves (not copies): a CUDA graph that updates them keeps reading these.
  std::map<std::string, at::Tensor> state() const;
  void load_state(const std::map<std::string, at::Tensor>& state);  // copies into state()'s tensors

 private:
  LossScalerOptions options_;
  at::Tensor scale_;           // ()
  at::Tensor growth_tracker_;  // () good steps in a row
  at::Tensor skipped_;         // ()
  at::Tensor found_inf_;       // ()
  at::Tensor inv_scale_;       // () 1 / scale, recomputed each step
};

}  // namespace pinfeed::engine

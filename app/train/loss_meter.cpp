#include "app/train/loss_meter.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

namespace pinfeed::app {

LossMeter::LossMeter(c10::Device device, std::optional<c10::Stream> stream) : device_(device), stream_(stream) {
  reset();
}

void LossMeter::reset() {
  sum_ = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  count_ = 0;
  shown_ = NAN;
  snapshot_ = at::Tensor();
}

void LossMeter::add(const at::Tensor& loss) {
  sum_.add_(loss.to(at::kFloat));
  ++count_;
}

void LossMeter::restore(double sum, int64_t count) {
  sum_.fill_(sum);  // exact: a float's value
  count_ = count;
}

double LossMeter::latest() {
  if (!stream_) return count_ ? sum_.item<double>() / count_ : NAN;
  if (snapshot_.defined() && ready_->query()) {
    shown_ = snapshot_.item<double>() / snapshot_count_;
    snapshot_ = at::Tensor();
  }
  if (!snapshot_.defined() && count_) {
    snapshot_ = sum_.to(at::kCPU, /*non_blocking=*/true);
    snapshot_count_ = count_;
    ready_ = std::make_shared<gpu::Event>();
    ready_->record(*stream_);
  }
  return shown_;
}

bool loss_diverged(double mean_loss, int64_t num_classes, bool fp16) {
  if (std::isnan(mean_loss) && fp16) return false;
  if (!std::isfinite(mean_loss)) return !fp16;
  return mean_loss > kDivergedLossFactor * std::log(static_cast<double>(std::max<int64_t>(num_classes, 2)));
}

double LossMeter::mean() const { return count_ ? sum_.item<double>() / count_ : NAN; }

}  // namespace pinfeed::app

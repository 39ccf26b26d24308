#include "engine/step/step_losses.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <cmath>

namespace pinfeed::engine {

StepLosses::StepLosses(c10::Device device, std::optional<c10::Stream> stream) : device_(device), stream_(stream) {}

StepLosses::~StepLosses() {
  if (copied_) copied_->synchronize();  // the copy writes into host_losses_
}

void StepLosses::start_epoch(int64_t steps, int64_t first) {
  if (copied_) copied_->synchronize();
  copied_.reset();
  const auto f = at::TensorOptions().dtype(at::kFloat);
  if (!device_losses_.defined() || device_losses_.numel() != steps) {
    device_losses_ = at::full({steps}, NAN, f.device(device_));
    host_losses_ = stream_ ? gpu::pinned_empty({steps}, at::kFloat) : device_losses_;  // the CPU: one tensor
  }
  lrs_.assign(static_cast<size_t>(steps), NAN);
  first_ = added_ = issued_ = arrived_ = first;
  waiting_.clear();
}

void StepLosses::add(int64_t step, const at::Tensor& loss, double lr) {
  if (step < 0 || step >= device_losses_.numel()) return;
  device_losses_.select(0, step).copy_(loss.detach().reshape({}));  // on the device: the host does not wait
  lrs_[static_cast<size_t>(step)] = lr;
  added_ = step + 1;
  if (!stream_) arrived_ = issued_ = added_;  // the CPU: the value is in host memory already
}

void StepLosses::poll(bool wait) {
  if (!stream_) return;
  if (copied_ && (wait || copied_->query())) {
    if (wait) copied_->synchronize();
    arrived_ = issued_;
    copied_.reset();
  }
  if (!copied_ && added_ > issued_ && (wait || added_ - issued_ >= kCopyEvery)) {
    const int64_t n = added_ - issued_;
    host_losses_.narrow(0, issued_, n).copy_(device_losses_.narrow(0, issued_, n), /*non_blocking=*/true);
    copied_ = std::make_shared<gpu::Event>();
    copied_->record(*stream_);
    issued_ = added_;
    if (wait) {
      copied_->synchronize();
      arrived_ = issued_;
      copied_.reset();
    }
  }
}

std::vector<StepRow> StepLosses::join(std::vector<pipeline::StepRecord> records, bool wait) {
  waiting_.insert(waiting_.end(), records.begin(), records.end());
  poll(wait);
  std::vector<StepRow> rows;
  const float* host = host_losses_.defined() ? host_losses_.data_ptr<float>() : nullptr;
  while (!waiting_.empty()) {
    const int64_t step = waiting_.front().step;
    const bool known = host && step >= first_ && step < host_losses_.numel();
    if (known && step >= arrived_ && !wait) break;  // its loss is still on its way
    StepRow row{waiting_.front()};
    if (known && step < arrived_) {
      row.loss = host[step];
      row.lr = lrs_[static_cast<size_t>(step)];
    }
    rows.push_back(row);
    waiting_.pop_front();
  }
  return rows;
}

}  // namespace pinfeed::engine

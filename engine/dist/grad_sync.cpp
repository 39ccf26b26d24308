#include "engine/dist/grad_sync.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <stdexcept>
#include <vector>

namespace pinfeed::engine {
namespace {

// Runs after a parameter's AccumulateGrad node: its .grad is final for this backward.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

}  // namespace

GradSync::GradSync(std::vector<at::Tensor> params, c10::intrusive_ptr<c10d::Backend> backend, int64_t bucket_bytes,
                   bool overlap)
    : params_(std::move(params)), bucket_of_(params_.size(), -1), backend_(std::move(backend)), overlap_(overlap) {
  int64_t filled = bucket_bytes;  // forces a first bucket
  for (size_t i = params_.size(); i-- > 0;) {
    const at::Tensor& p = params_[i];
    if (p.scalar_type() != at::kFloat) throw std::invalid_argument("GradSync: parameters must be float32");
    const int64_t bytes = p.numel() * 4;
    if (filled + bytes > bucket_bytes && filled > 0) {
      buckets_.emplace_back();
      filled = 0;
    }
    Bucket& b = buckets_.back();
    b.offset.push_back(b.params.empty() ? 0 : b.offset.back() + params_[b.params.back()].numel());
    b.params.push_back(i);
    bucket_of_[i] = static_cast<int>(buckets_.size()) - 1;
    filled += bytes;
  }
  at::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    const int64_t numel = b.offset.back() + params_[b.params.back()].numel();
    b.flat = at::zeros({numel}, params_[b.params.front()].options());
    // In place from the start: accumulating micro-batches (and the graphs captured for them) add into the bucket.
    for (size_t k = 0; k < b.params.size(); ++k) params_[b.params[k]].mutable_grad() = span(b, k, params_[b.params[k]]);
  }
  if (overlap_) {
    for (size_t i = 0; i < params_.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
      accumulator->add_post_hook(std::make_unique<GradReadyHook>([this, i] { on_grad_ready(i); }));
      accumulators_.push_back(std::move(accumulator));
    }
  }
  start_step();
}

void GradSync::start_step() {
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.work.reset();
  }
}

// On the autograd engine's thread for the device, with the stream that produced the gradient current: the
// copy and the collective are queued behind it (ProcessGroupNCCL makes its stream wait on the current one).
void GradSync::on_grad_ready(size_t param) {
  if (!reduce_) return;  // a micro-batch before the last of an optimizer step
  Bucket& b = buckets_[bucket_of_[param]];
  if (b.pending <= 0) return;  // a second accumulation of the same parameter (none in a ResNet)
  if (--b.pending == 0) launch(b);
}

// Parameter k's span of the bucket, laid out as `like` where that is dense (a channels_last gradient's span holds
// it in its own order): a copy between the two is then a plain copy, which one _foreach_copy_ does for a whole
// bucket in a few kernels rather than one per parameter.
at::Tensor GradSync::span(const Bucket& b, size_t k, const at::Tensor& like) const {
  const at::Tensor& p = params_[b.params[k]];
  const at::Tensor chunk = b.flat.narrow(0, b.offset[k], p.numel());
  if (like.is_non_overlapping_and_dense() && like.sizes() == p.sizes()) return chunk.as_strided(like.sizes(), like.strides());
  return chunk.view(p.sizes());
}

bool GradSync::in_bucket(const Bucket& b, size_t k) const {
  const at::Tensor& g = params_[b.params[k]].grad();
  return g.defined() && g.is_alias_of(b.flat) &&
         g.data_ptr() == static_cast<const char*>(b.flat.data_ptr()) + b.offset[k] * b.flat.element_size();
}

// A .grad that backward made anew (the step reset it, or its first step) is copied into its span once and replaced
// by the span: later backwards that keep it (accumulation) add into the bucket, and the optimizer reads the bucket.
void GradSync::launch(Bucket& b) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> spans, grads;
  for (size_t k = 0; k < b.params.size(); ++k) {
    if (in_bucket(b, k)) continue;
    at::Tensor& p = params_[b.params[k]];
    at::Tensor s = span(b, k, p.grad().defined() ? p.grad() : p);
    if (p.grad().defined()) {
      spans.push_back(s);
      grads.push_back(p.grad());  // kept alive here until the copy below
    } else {
      s.zero_();  // a parameter that took no part in this step contributes zeros, as in DDP
    }
    p.mutable_grad() = s;
  }
  if (!spans.empty()) at::_foreach_copy_(spans, grads);
  std::vector<at::Tensor> tensors{b.flat};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::AVG;
  b.work = backend_->allreduce(tensors, o);
  b.pending = -1;  // launched
}

void GradSync::finish_step() {
  for (Bucket& b : buckets_) {
    if (!b.work) launch(b);  // overlap off, or a bucket some of whose gradients never came
  }
  for (Bucket& b : buckets_) b.work->wait();  // NCCL: the current stream waits, not the host; Gloo: the host waits
  start_step();
}

}  // namespace pinfeed::engine

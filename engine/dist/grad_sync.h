// Gradient averaging across ranks, as Python's DistributedDataParallel does it: parameters in buckets of
// ~25 MB in reverse registration order (about the order backward produces their gradients); a bucket is
// all-reduced (averaged) as soon as its last gradient is accumulated, from an autograd hook, so the
// communication overlaps the rest of backward; finish() waits for every bucket before the optimizer steps. A
// gradient is copied into its bucket once and then left there, its .grad a view of its span (DDP's
// gradient_as_bucket_view): the optimizer reads the averages where the all-reduce wrote them, with no copy back.
//
// Ours rather than c10d::Reducer (which works from C++ too, docs/multi-gpu.md): Reducer's C++
// constructor is undocumented and has changed between releases, it rebuilds its buckets after the first step,
// and it cannot switch the overlap off, which the measurement of what overlap buys needs.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace pinfeed::engine {

class GradSync {
 public:
  // overlap false: every bucket is all-reduced after backward has finished (for measuring the overlap).
  GradSync(std::vector<at::Tensor> params, c10::intrusive_ptr<c10d::Backend> backend, int64_t bucket_bytes,
           bool overlap);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void start_step();   // before backward: every bucket waits for its gradients again
  // Gradient accumulation: false during the backward passes of the micro-batches before an optimizer step's last
  // (their gradients only add up in .grad), true for the last one, whose hooks then reduce the sums.
  void set_reduce(bool on) { reduce_ = on; }
  void finish_step();  // after backward: all buckets reduced; every .grad is its span of its bucket
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // of each in flat
    at::Tensor flat;              // (numel,) float32, on the parameters' device
    int pending = 0;              // gradients not yet copied in this step
    c10::intrusive_ptr<c10d::Work> work;
  };
  void on_grad_ready(size_t param);
  void launch(Bucket& bucket);
  at::Tensor span(const Bucket& bucket, size_t k, const at::Tensor& like) const;  // parameter k's part of the bucket
  bool in_bucket(const Bucket& bucket, size_t k) const;  // parameter k's .grad is its span already

  std::vector<at::Tensor> params_;
  std::vector<int> bucket_of_;  // param -> bucket
  std::vector<Bucket> buckets_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  bool overlap_;
  bool reduce_ = true;
  // AccumulateGrad nodes hold our hooks; a parameter keeps its node only weakly, so they are kept here.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

}  // namespace pinfeed::engine

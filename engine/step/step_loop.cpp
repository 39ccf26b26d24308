#include "engine/step/step_loop.h"

#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>

#include <algorithm>

#include "engine/signals.h"
#include "engine/step/step_trace.h"
#include "gpu/gpu.h"

namespace pinfeed::engine {
namespace {

// The ranks' agreement to stop. Every every_ steps (about 10, a multiple of the steps a stop must fall between)
// each rank posts its stop flag in an all-reduce (max) and reads the one it posted every_ steps earlier, long
// finished by then: on CUDA the result comes back by an asynchronous copy and an event, so voting never makes
// the host wait for the GPU. One rank: a stop acts at the next step it may fall before.
class StopVote {
 public:
  StopVote(const StopRequest* stop, Distributed* dist, int64_t stop_every, c10::Device device,
           std::optional<c10::Stream> stream)
      : stop_(stop), dist_(dist && dist->active() ? dist : nullptr), stream_(stream),
        every_(dist_ ? (10 + stop_every - 1) / stop_every * stop_every : stop_every) {
    if (!dist_) return;
    flag_ = at::zeros({1}, at::TensorOptions().device(device).dtype(at::kFloat));
    result_ = stream_ ? gpu::pinned_empty({1}, at::kFloat) : at::zeros({1}, at::kFloat);
  }
  ~StopVote() {
    if (ready_) ready_->synchronize();
  }

  bool stop(int64_t step) {
    if (step % every_ != 0) return false;
    if (!dist_) return requested();
    bool agreed = false;
    if (posted_) {
      if (ready_) ready_->synchronize();
      agreed = result_.item<float>() > 0;
    }
    if (agreed) return true;
    flag_.fill_(requested() ? 1.0f : 0.0f);
    std::vector<at::Tensor> v{flag_};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    dist_->backend()->allreduce(v, o)->wait();  // NCCL: the compute stream waits; Gloo: done on return
    result_.copy_(flag_, /*non_blocking=*/true);
    if (stream_) {
      if (!ready_) ready_ = std::make_shared<gpu::Event>();
      ready_->record(*stream_);
    }
    posted_ = true;
    return false;
  }

 private:
  bool requested() const { return stop_ && stop_->requested(); }

  const StopRequest* stop_;
  Distributed* dist_;
  std::optional<c10::Stream> stream_;
  int64_t every_;
  at::Tensor flag_, result_;  // (1,) on the device; (1,) on the host (pinned on CUDA)
  std::shared_ptr<gpu::Event> ready_;
  bool posted_ = false;
};

}  // namespace

StepLoopResult run_steps(pipeline::BatchSource& source, pipeline::StepMeter& meter, const StepLoopOptions& o,
                         const StepFn& step, const StepFn& after) {
  StepLoopResult r;
  r.epoch = o.epoch;
  r.next_step = o.first_step;
  StopVote vote(o.stop, o.dist, std::max<int64_t>(1, o.stop_every), o.device, o.stream);
  meter.start_epoch(o.warmup_steps, o.first_step);
  source.start_epoch(o.epoch, o.first_step);
  while (r.next_step < o.end_step) {
    if (vote.stop(r.next_step - o.first_step)) {
      r.stopped = true;
      break;
    }
    if (o.trace) o.trace->before_step(o.trace_offset + r.next_step, meter);
    {
      RECORD_USER_SCOPE("pinfeed::ahead");
      meter.hold_back(o.max_steps_ahead);
    }
    std::optional<pipeline::DeviceBatch> batch;
    {
      RECORD_USER_SCOPE("pinfeed::wait");
      batch = source.next();
      if (!batch && o.wrap) {
        source.start_epoch(++r.epoch);
        batch = source.next();
      }
    }
    if (!batch) break;
    {
      RECORD_USER_SCOPE("pinfeed::step");
      meter.begin_step();
      step(*batch, r.next_step);
      meter.end_step(batch->size, batch->timing);
    }
    if (o.trace) o.trace->after_step(o.trace_offset + r.next_step, meter);
    if (after) after(*batch, r.next_step);
    ++r.next_step;
  }
  if (o.trace) o.trace->end_loop(meter);
  r.timing = meter.finish_epoch();
  return r;
}

}  // namespace pinfeed::engine

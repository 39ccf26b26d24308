// Each step's training loss and lr for steps.jsonl, read without making the host wait for the GPU: the losses
// stay in a device tensor (one slot per step of the epoch, written on the compute stream), and once a batch of
// steps has gathered they are copied to the host in one asynchronous copy followed by an event. A step's row
// is handed out when both its meter record (pipeline/timing/step_meter.h, itself a few steps late) and its loss are
// on the host.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "gpu/gpu.h"
#include "pipeline/timing/step_meter.h"

namespace pinfeed::engine {

// One row of steps.jsonl: the meter's figures, the step's training loss (this rank's, NaN if unknown) and lr.
struct StepRow {
  pipeline::StepRecord record;
  double loss = NAN;
  double lr = NAN;
};

class StepLosses {
 public:
  // stream: the compute stream on CUDA (the current stream when add() runs), nullopt on the CPU.
  StepLosses(c10::Device device, std::optional<c10::Stream> stream);
  ~StepLosses();
  // steps: the epoch's number of steps (slots); first: where a resumed epoch starts.
  void start_epoch(int64_t steps, int64_t first);
  void add(int64_t step, const at::Tensor& loss, double lr);  // the step's mean loss, on the device
  // records (StepMeter::take_resolved) joined with their losses, oldest first; records whose loss is not on the
  // host yet are kept for a later call. wait: every record given so far, waiting for the copy (epoch end).
  std::vector<StepRow> join(std::vector<pipeline::StepRecord> records, bool wait = false);

  static constexpr int64_t kCopyEvery = 32;  // steps per copy: one small copy and an event, not one per step

 private:
  void poll(bool wait);

  c10::Device device_;
  std::optional<c10::Stream> stream_;
  at::Tensor device_losses_;  // (steps,) float on the device
  at::Tensor host_losses_;    // (steps,) float on the host, pinned on CUDA
  std::vector<double> lrs_;   // (steps,)
  int64_t first_ = 0;
  int64_t added_ = 0;    // steps [first_, added_) have their loss on the device
  int64_t issued_ = 0;   // steps [first_, issued_) have a copy issued
  int64_t arrived_ = 0;  // steps [first_, arrived_) are on the host
  std::shared_ptr<gpu::Event> copied_;
  std::deque<pipeline::StepRecord> waiting_;
};

}  // namespace pinfeed::engine

// Feeder: the loader, its host ring and the host-to-device step, in whichever transfer mode was asked for.
// The trainer only calls next(); the mode decides how the batch got there.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "data/loader/loader.h"
#include "pipeline/augment/augmenter.h"
#include "pipeline/transfer/batch_source.h"
#include "gpu/gpu.h"
#include "pipeline/transfer/host_ring.h"
#include "pipeline/decode/jpeg_decoder.h"
#include "pipeline/transfer/options.h"
#include "pipeline/timing/step_meter.h"

namespace pinfeed::pipeline {

struct FeederOptions {
  c10::Device device = c10::Device(c10::kCPU);
  std::optional<c10::Stream> compute_stream;  // CUDA: the stream the batches are consumed on (required)
  bool channels_last = false;
  // The model's input from uint8 pixels (pipeline.transfer_dtype = "uint8", or the GPU decoder): its type, and 3
  // channels or 4 (RGB and a zero channel: model/resnet.h). float16 saves autocast's cast of a float32 batch.
  // kByte (CPU-decoded uint8 pixels only, 3 channels): the pixels as they are, (B, 3, S, S), not normalised.
  c10::ScalarType input_dtype = c10::kFloat;
  int64_t input_channels = 3;
};

// dual_stream on CUDA: a copier thread of the Feeder's own takes each batch from the loader as soon as it is
// decoded and issues its copy (and, for uint8, its normalisation) on a copy stream, up to kDeviceAhead batches
// ahead; next() on the training thread only takes a ready batch and makes the compute stream wait for it.
// At an epoch's end the copier carries on into the next epoch's first batches (as the loader's workers do,
// LoaderOptions::continue_into_next_epoch): with the GPU decoder, a batch's decode is the copier's work, and an epoch
// that began with nothing copied made the GPU wait for a whole decode at every epoch boundary.
// A training Feeder given augmentations (augment/options.h) applies them to each batch on its device, on the stream
// that copied it: the policy's ops on the uint8 pixels before they are normalised (they need uint8 pixels:
// pipeline.transfer_dtype = "uint8" or the GPU decoder, which then writes uint8 pixels rather than the model's
// input), erasing and Mixup/CutMix on the normalised batch before its cast to the model's input type.
// Issuing a copy is driver and allocator work, dearer next to busy decode workers: kept off the thread that
// launches the GPU's kernels (docs/transfer-modes.md#current-table).
// A stuck sample or a stop asked for never leaves next() waiting: in every mode it throws what the loader throws
// (data::StuckSample after loader_options.sample_timeout_s, data::Interrupted once loader_options.stop_requested()
// is true), from the copier's loader.next() in dual_stream as from its own. Like a worker's error, either ends the
// epoch for the copier: start_epoch() to go on.
class Feeder : public BatchSource {
 public:
  static constexpr int kDeviceAhead = 2;  // dual_stream: batches copied to the device ahead of the current one

  // augment: the training batches' (any() false: none; validation passes none). Its draws are keyed by the
  // loader's seed, batch size and shard.
  Feeder(std::shared_ptr<const data::Dataset> dataset, data::LoaderOptions loader_options,
         PipelineOptions options, FeederOptions feeder_options, augment::AugmentOptions augment = {});
  // Bounded, also with a worker stuck: the copier leaves its wait on the loader within data::kStopPoll, and the
  // loader leaves a stuck worker running (data::Loader::~Loader).
  ~Feeder() override;

  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  std::optional<DeviceBatch> next() override;
  // next() for a consumer whose stream may change between calls (the Python module: its caller's current stream):
  // on CUDA the batch is made ready for `consumer`, and its device memory kept from reuse until `consumer` is
  // past it, instead of feeder_options.compute_stream's. Ignored on the CPU.
  std::optional<DeviceBatch> next_for(const c10::Stream& consumer);
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }

  const PipelineOptions& options() const { return options_; }  // what really runs (after any fallback)
  std::string mode() const { return mode_name(options_); }
  int64_t pinned_bytes() const { return ring_->pinned() ? ring_->bytes() : 0; }
  int64_t host_ring_bytes() const { return ring_->bytes(); }
  int workers() const { return loader_->workers(); }
  const data::Loader& loader() const { return *loader_; }
  const HostRing& ring() const { return *ring_; }
  // The GPU decoder's counts (data.decoder = "nvjpeg"), nullopt when the CPU decodes.
  std::optional<pipeline::JpegDecodeStats> decode_stats() const;
  // What waits ahead of the consumer now: batches on the device (dual_stream's copier: copied, at most
  // kDeviceAhead), and in the host ring, decoded or still loading.
  struct QueueDepth {
    int copied = 0;
    int decoded = 0;
    int loading = 0;
  };
  QueueDepth queue_depth();

 private:
  struct Copied {  // one item of the copier's queue; no batch and no error: the epoch is over
    int64_t epoch = 0;
    std::optional<DeviceBatch> batch;
    std::shared_ptr<gpu::Event> ready;  // on the copy stream, after the copy and normalisation
    std::exception_ptr error;
  };

  void make_ring(const data::Dataset& dataset, int64_t batch_size, int slots);
  std::optional<DeviceBatch> transfer(const c10::Stream* stream);  // loader.next() + copy (+ normalise)
  // The model's input from the batch's pixels on its device (uint8 (B, S, S, 3) or float32 (B, 3, S, S)),
  // augmented when the Feeder augments (labels then maybe made soft targets). stream: the CUDA stream its work
  // is issued on (the current one), null on the CPU.
  at::Tensor to_model_layout(at::Tensor images, at::Tensor& labels, const data::Batch& batch,
                             const c10::Stream* stream = nullptr) const;
  void copier_loop();
  void start_copier_epoch(int64_t epoch, int64_t first_batch);
  int batches_copied_locked() const;  // in the queue, end-of-epoch markers not counted
  // timing.loader_ms: time blocked because nothing was copied yet
  std::optional<DeviceBatch> next_copied(const c10::Stream& consumer);
  // Waits on cv_ until ready(), in slices of data::kStopPoll: throws data::Interrupted once stop_requested_().
  template <class Ready>
  void wait_locked(std::unique_lock<std::mutex>& lock, Ready ready);

  PipelineOptions options_;
  FeederOptions feeder_options_;
  bool cuda_ = false;
  // Before loader_, so destroyed after it: its workers call the stop check, which reads both, until they are
  // joined (the destructor resets loader_ first; a constructor that throws after making it does not).
  std::function<bool()> stop_requested_;  // the caller's (LoaderOptions::stop_requested), or empty
  // Set by the destructor: the loader's waits end then too (its stop_requested is this or the caller's).
  std::atomic<bool> closing_{false};
  std::unique_ptr<HostRing> ring_;
  std::unique_ptr<data::Loader> loader_;
  std::optional<data::Batch> held_;  // CPU: batch in use by the model, recycled at the next call
  gpu::EventPool events_;
  at::Tensor scale_, shift_;  // (1, 3, 1, 1) on the device: uint8 pixel * scale + shift = normalised value
  data::PixelAffine affine_{};  // the same on the host, for the fused kernel (augment/normalise_mix.h)
  std::unique_ptr<pipeline::JpegDecoder> decoder_;  // the dataset leaves JPEGs to the GPU (gpu_decode)
  std::unique_ptr<augment::Augmenter> augmenter_;  // training batches' augmentations, or null

  // dual_stream copier
  std::optional<c10::Stream> copy_stream_;
  std::thread copier_;
  std::mutex mutex_;  // guards the fields below
  std::condition_variable cv_;
  std::deque<Copied> copied_;
  int64_t epoch_ = -1;        // the epoch next() hands out
  bool epoch_over_ = false;   // next() has returned its end
  int64_t copy_epoch_ = -1;   // the epoch the copier is in (epoch_, or epoch_ + 1 once it carried on)
  bool copying_ = false;      // the copier has batches left to copy
  bool busy_ = false;         // the copier is inside transfer() (or starting the next epoch)
  bool stop_ = false;
};

}  // namespace pinfeed::pipeline

#include "pipeline/transfer/feeder.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "common/log.h"
#include "data/error.h"
#include "pipeline/augment/normalise_mix.h"
#include "pipeline/error_text.h"

namespace pinfeed::pipeline {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A slot's fence: the CUDA event recorded after the copy that read it.
class EventFence : public data::Fence {
 public:
  explicit EventFence(std::shared_ptr<gpu::Event> event) : event_(std::move(event)) {}
  bool ready() override { return event_->query(); }
  void wait() override { event_->synchronize(); }

 private:
  std::shared_ptr<gpu::Event> event_;
};

}  // namespace

Feeder::Feeder(std::shared_ptr<const data::Dataset> dataset, data::LoaderOptions loader_options,
               PipelineOptions options, FeederOptions feeder_options, augment::AugmentOptions augment)
    : options_(options), feeder_options_(feeder_options), cuda_(feeder_options.device.is_cuda()) {
  // What the plan decided (app/plan/plan.cpp), asserted, not decided again.
  const OptionsProblem problem = check_options(options_, cuda_);
  TORCH_INTERNAL_ASSERT(!problem, problem.message);
  TORCH_INTERNAL_ASSERT(!cuda_ || feeder_options_.compute_stream, "Feeder on CUDA needs its compute stream");
  const bool u8_pixels = dataset->transform().format == data::PixelFormat::kUint8Hwc;
  TORCH_INTERNAL_ASSERT(u8_pixels == (options_.transfer_dtype == TransferDtype::kUint8),
                        "the dataset's pixels and pipeline.transfer_dtype disagree");
  TORCH_INTERNAL_ASSERT(feeder_options_.input_dtype != at::kByte ||
                            (u8_pixels && !dataset->transform().gpu_decode && feeder_options_.input_channels == 3),
                        "uint8 input is the CPU's uint8 pixels as they are: 3 channels, no GPU decoder");
  if (dataset->transform().gpu_decode) {
    TORCH_INTERNAL_ASSERT(cuda_, "the GPU decoder needs a CUDA device");
    decoder_ = std::make_unique<pipeline::JpegDecoder>(feeder_options_.device, dataset->transform());
  }
  if (augment.any()) {
    TORCH_INTERNAL_ASSERT(!augment.pixel_ops() || u8_pixels, "the policy's ops need uint8 pixels on the device");
    const augment::DrawKeys keys{loader_options.seed, loader_options.batch_size, loader_options.shard_rank,
                                 loader_options.shards};
    augmenter_ = std::make_unique<augment::Augmenter>(augment, keys, feeder_options_.device);
  }
  const int slots = ring_slots(loader_options.prefetch_batches);
  make_ring(*dataset, loader_options.batch_size, slots);
  // The loader is only ever asked on this Feeder's threads (next(), start_epoch(), the copier), all done before the
  // destructor's end: `this` outlives every call.
  stop_requested_ = std::move(loader_options.stop_requested);
  loader_options.stop_requested = [this] {
    return closing_.load(std::memory_order_relaxed) || (stop_requested_ && stop_requested_());
  };
  loader_ = std::make_unique<data::Loader>(std::move(dataset), loader_options, ring_.get());
  const auto& t = loader_->dataset().transform();
  if (options_.transfer_dtype == TransferDtype::kUint8) {
    // One multiply that also casts, one add, both on the device (the GPU decoder's kernel does its own).
    affine_ = data::uint8_normalisation(t);
    const data::PixelAffine& a = affine_;
    scale_ = at::tensor(std::vector<float>(a.scale, a.scale + 3)).view({1, 3, 1, 1}).to(feeder_options_.device);
    shift_ = at::tensor(std::vector<float>(a.shift, a.shift + 3)).view({1, 3, 1, 1}).to(feeder_options_.device);
  }
  if (cuda_ && options_.dual_stream) {
    copy_stream_ = gpu::new_stream(feeder_options_.device);
    copier_ = std::thread([this] { copier_loop(); });
  }
}

Feeder::~Feeder() {
  closing_ = true;  // a copier waiting in loader_->next() (a worker stuck) leaves it within data::kStopPoll
  if (copier_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    copier_.join();  // after any transfer it is in: the workers are still there to finish that batch
  }
  copied_.clear();
  // Stops the workers before the ring's memory goes: one left running (stuck) never writes into the ring.
  loader_.reset();
}

void Feeder::make_ring(const data::Dataset& dataset, int64_t batch_size, int slots) {
  // Sized for the largest side a schedule gives: a smaller epoch's batch fills each slot from its front.
  const SampleFormat sample = sample_format(dataset.transform().format, data::largest_side(dataset.transform(), dataset.train()));
  const bool encoded = dataset.transform().gpu_decode;
  if (options_.pin_memory) {
    const int64_t want = ring_bytes(slots, batch_size, dataset.image_bytes());
    const int64_t budget_mb = options_.pinned_budget_mb > 0 ? options_.pinned_budget_mb : default_pinned_budget_mb();
    std::string why;
    if (want > budget_mb * (int64_t{1} << 20)) {
      why = "the ring needs " + std::to_string(want >> 20) + " MB, over pipeline.pinned_budget_mb = " +
            std::to_string(budget_mb);
    } else {
      try {
        ring_ = std::make_unique<HostRing>(slots, batch_size, sample.shape, sample.dtype, /*pinned=*/true, encoded);
        return;
      } catch (const std::exception& e) {
        why = "page-locked allocation failed: " + error_text(e);
      }
    }
    log::warn("pinned memory unavailable (" + why + "); falling back to mode pageable");
    options_.pin_memory = options_.non_blocking = options_.dual_stream = false;
    options_.mode = Mode::kPageable;
  }
  ring_ = std::make_unique<HostRing>(slots, batch_size, sample.shape, sample.dtype, /*pinned=*/false, encoded);
}

template <class Ready>
void Feeder::wait_locked(std::unique_lock<std::mutex>& lock, Ready ready) {
  // The copier's own loader_->next() throws StuckSample or Interrupted into the queue, which makes ready() true;
  // the stop is also looked at here, in case the copier is held elsewhere (a fence, a copy).
  while (!cv_.wait_for(lock, data::kStopPoll, ready)) {
    if (stop_requested_ && stop_requested_()) throw data::Interrupted();
  }
}

void Feeder::start_epoch(int64_t epoch, int64_t first_batch) {
  if (copier_.joinable()) {
    start_copier_epoch(epoch, first_batch);
    return;
  }
  if (held_) {
    loader_->recycle(*held_);
    held_.reset();
  }
  loader_->start_epoch(epoch, first_batch);
}

void Feeder::start_copier_epoch(int64_t epoch, int64_t first_batch) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Batches copied but not taken are dropped: their slots are fenced on their copies already, and their device
  // memory goes back to the caching allocator in copy-stream order, so that is safe.
  if (first_batch == 0 && epoch == epoch_ + 1 && copy_epoch_ == epoch && copying_) {
    // The copier carried on into this epoch past the current one's end: keep what it copied of this epoch,
    // without waiting for the batch it may be copying now.
    copied_.erase(std::remove_if(copied_.begin(), copied_.end(), [&](const Copied& c) { return c.epoch != epoch; }),
                  copied_.end());
  } else {
    copying_ = false;
    wait_locked(lock, [&] { return !busy_; });  // a transfer in progress lands in the queue, dropped next
    copied_.clear();
    lock.unlock();
    loader_->start_epoch(epoch, first_batch);  // the copier is idle: the loader is this thread's alone
    lock.lock();
    copy_epoch_ = epoch;
    copying_ = true;
  }
  epoch_ = epoch;
  epoch_over_ = false;
  lock.unlock();
  cv_.notify_all();
}

Feeder::QueueDepth Feeder::queue_depth() {
  QueueDepth q;
  if (copy_stream_) {
    std::lock_guard<std::mutex> lock(mutex_);
    q.copied = batches_copied_locked();
  }
  const data::Loader::Queue l = loader_->queue();
  q.decoded = l.decoded;
  q.loading = l.loading;
  return q;
}

int Feeder::batches_copied_locked() const {
  return static_cast<int>(std::count_if(copied_.begin(), copied_.end(), [](const Copied& c) { return c.batch.has_value(); }));
}

void Feeder::copier_loop() {
  const bool carry_on = loader_->options().continue_into_next_epoch;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (copying_ && batches_copied_locked() < kDeviceAhead); });
    if (stop_) return;
    busy_ = true;
    Copied item;
    item.epoch = copy_epoch_;
    lock.unlock();
    bool next_epoch = false;
    try {
      item.batch = transfer(&*copy_stream_);
      if (item.batch) {
        item.ready = events_.get();
        item.ready->record(*copy_stream_);
      } else if (carry_on) {
        loader_->start_epoch(item.epoch + 1);  // keeps the next epoch's batches the workers began
        next_epoch = true;
      }
    } catch (...) {
      item.error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (next_epoch) {
      copy_epoch_ = item.epoch + 1;
    } else if (!item.batch) {
      copying_ = false;  // the epoch's end, or a failure: wait for the next start_epoch
    }
    copied_.push_back(std::move(item));
    cv_.notify_all();
  }
}

std::optional<DeviceBatch> Feeder::next_copied(const c10::Stream& consumer) {
  Copied item;
  double waited_ms = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto ready = [&] { return !copied_.empty() && copied_.front().epoch == epoch_; };
    if (epoch_over_ || (!ready() && !(copying_ && copy_epoch_ == epoch_))) return std::nullopt;  // no epoch on
    if (!ready()) {  // nothing copied yet: the input pipeline is behind
      const auto t0 = std::chrono::steady_clock::now();
      wait_locked(lock, ready);
      waited_ms = ms_since(t0);
    }
    item = std::move(copied_.front());
    copied_.pop_front();
    if (!item.batch) epoch_over_ = true;
  }
  cv_.notify_all();  // room for the copier to issue one more
  if (item.error) std::rethrow_exception(item.error);
  if (!item.batch) return std::nullopt;
  // The consumer's stream (not the host) waits for the copy. The batch was allocated on the copy stream and is
  // used on the consumer's: keep the caching allocator from handing its blocks out again before that stream is
  // done with them (images and labels share one block, or the images are the block the uint8 normalisation or
  // the GPU decoder wrote).
  item.ready->block(consumer);
  item.batch->images.record_stream(consumer);
  item.batch->labels.record_stream(consumer);
  item.batch->timing.loader_ms = waited_ms;
  return std::move(item.batch);
}

at::Tensor Feeder::to_model_layout(at::Tensor images, at::Tensor& labels, const data::Batch& batch,
                                   const c10::Stream* stream) const {
  // The batch's draws, from its keys, uploaded once on the current stream (the copy stream on CUDA).
  augment::BatchDraws draws;
  augment::DeviceDraws device_draws;
  if (augmenter_) {
    draws = augmenter_->draw(batch.epoch, batch.index, batch.size, batch.side);
    device_draws = augmenter_->upload(draws);
  }
  if (options_.transfer_dtype == TransferDtype::kUint8 && feeder_options_.input_dtype == at::kByte) {
    if (augmenter_) augmenter_->apply_pixels(images, device_draws);  // the pixel ops only: no mixing of raw pixels
    images = images.permute({0, 3, 1, 2});  // the pixels as they are: channels_last strides already
    return feeder_options_.channels_last ? images : images.contiguous();
  }
  if (options_.transfer_dtype == TransferDtype::kUint8) {
    if (augmenter_) augmenter_->apply_pixels(images, device_draws);  // in place: the batch's own memory
    const int channels = feeder_options_.input_channels;
    if (stream && !(augmenter_ && augmenter_->options().erasing())) {
      // One kernel, the same values as the chain below; erasing's random values come from ATen's generator.
      images = augment::normalise_mix(images, affine_, draws.mix, channels, feeder_options_.input_dtype, *stream);
      if (augmenter_) augmenter_->apply_labels(labels, draws);
    } else {
      images = augment::normalise(images, scale_, shift_);
      if (augmenter_) augmenter_->apply_batch(images, labels, draws, device_draws);
      images = augment::model_input(images, channels, feeder_options_.input_dtype);
    }
    return feeder_options_.channels_last ? images : images.contiguous();
  }
  if (augmenter_) augmenter_->apply_batch(images, labels, draws, device_draws);
  return feeder_options_.channels_last ? images.contiguous(c10::MemoryFormat::ChannelsLast) : images;
}

std::optional<DeviceBatch> Feeder::transfer(const c10::Stream* stream) {
  const auto t0 = std::chrono::steady_clock::now();
  auto batch = loader_->next();
  const double loader_ms = ms_since(t0);
  if (!batch) return std::nullopt;
  DeviceBatch out;
  out.timing.loader_ms = loader_ms;
  out.index = batch->index;
  out.size = batch->size;
  out.bad_images = batch->bad_images;
  out.epoch = batch->epoch;
  if (!cuda_) {  // the model reads the ring slot directly (augmented in place); it is recycled at the next call
    out.labels = ring_->labels(batch->slot).narrow(0, 0, batch->size);
    out.images = to_model_layout(ring_->layout().images(ring_->slot_bytes(batch->slot), batch->side).narrow(0, 0, batch->size),
                                 out.labels, *batch);
    held_ = batch;
    return out;
  }
  // One copy per batch: the whole slot (images, then labels), even for a final partial batch.
  c10::StreamGuard guard(*stream);  // device tensors are allocated on, and copied by, this stream
  const at::Tensor host = ring_->slot_bytes(batch->slot);
  at::Tensor device_slot = at::empty({host.numel()}, at::TensorOptions().dtype(c10::kByte).device(feeder_options_.device));
  out.timing.h2d_begin = events_.get();
  out.timing.h2d_end = events_.get();
  out.timing.h2d_begin->record(*stream);
  const SlotLayout& layout = ring_->layout();
  const auto copy = [&](int64_t from, int64_t to) {
    device_slot.narrow(0, from, to - from).copy_(host.narrow(0, from, to - from), options_.non_blocking);
  };
  // The labels and, when any sample crossed as pixels, the pixels at this batch's side: one copy when they fill
  // the slot, two at a smaller side than the one the ring was sized for.
  const auto copy_slot = [&](bool pixels) {
    const int64_t used = layout.image_bytes_at(batch->side);
    if (pixels && used == layout.image_bytes) return copy(0, layout.bytes);
    if (pixels) copy(0, used);
    copy(layout.labels_offset, layout.bytes);
  };
  if (decoder_) {
    // The labels, the pixels of any sample the CPU decoded (PNG, CMYK, ...), then the GPU decodes the rest into
    // the same images. The slot (its EncodedImage bytes too) is fenced on all of it.
    const std::vector<data::EncodedImage>& encoded = ring_->encoded(batch->slot);
    const bool cpu_pixels = std::any_of(encoded.begin(), encoded.begin() + batch->size,
                                        [](const data::EncodedImage& e) { return e.kind == data::JpegRoute::kCpu; });
    copy_slot(cpu_pixels);
    // The decoder writes the model's input itself (one kernel: crop, resize, flip, normalise); or, to be
    // augmented first, the uint8 pixels (B, S, S, 3).
    const int64_t s = batch->side;
    const auto layout_of_model = feeder_options_.channels_last ? c10::MemoryFormat::ChannelsLast
                                                               : c10::MemoryFormat::Contiguous;
    const auto on_device = at::TensorOptions().device(feeder_options_.device);
    out.images = augmenter_ ? at::empty({batch->size, s, s, 3}, on_device.dtype(c10::kByte))
                            : at::empty({batch->size, feeder_options_.input_channels, s, s},
                                        on_device.dtype(feeder_options_.input_dtype).memory_format(layout_of_model));
    try {
      decoder_->decode(encoded.data(), batch->size, layout.images(device_slot, batch->side),
                       augmenter_ ? out.images.permute({0, 3, 1, 2}) : out.images, *stream);
    } catch (...) {
      gpu::synchronize(*stream);  // nothing issued may still read the slot when it goes back
      loader_->recycle(*batch);
      throw;
    }
  } else {
    copy_slot(true);
  }
  out.timing.h2d_end->record(*stream);
  loader_->recycle(*batch, std::make_shared<EventFence>(out.timing.h2d_end));
  out.labels = layout.labels(device_slot).narrow(0, 0, batch->size);
  if (!decoder_) {
    out.images = to_model_layout(layout.images(device_slot, batch->side).narrow(0, 0, batch->size), out.labels, *batch,
                                 stream);
  } else if (augmenter_) {
    out.images = to_model_layout(out.images, out.labels, *batch, stream);
  }
  return out;
}

std::optional<pipeline::JpegDecodeStats> Feeder::decode_stats() const {
  if (!decoder_) return std::nullopt;
  return decoder_->stats();
}

std::optional<DeviceBatch> Feeder::next() {
  if (!cuda_) return next_for(c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU)));
  return next_for(*feeder_options_.compute_stream);
}

std::optional<DeviceBatch> Feeder::next_for(const c10::Stream& consumer) {
  const auto t0 = std::chrono::steady_clock::now();
  if (held_) {
    loader_->recycle(*held_);
    held_.reset();
  }
  std::optional<DeviceBatch> out;
  if (copier_.joinable()) {
    out = next_copied(consumer);
  } else if (cuda_) {
    out = transfer(&consumer);
  } else {
    out = transfer(nullptr);
  }
  if (out) out->timing.wait_ms = ms_since(t0);
  return out;
}

}  // namespace pinfeed::pipeline

#include "app/bench/bench_sources.h"

#include <chrono>

namespace pinfeed::app {

ResidentBatch::ResidentBatch(pipeline::DeviceBatch batch) : batch_(std::move(batch)) {
  batch_.images = batch_.images.clone();
  batch_.labels = batch_.labels.clone();
  batch_.bad_images = 0;
  batch_.timing = {};
  batch_.timing.loader_ms = pipeline::kNotApplicable;  // nothing is loaded
}

LoaderOnly::LoaderOnly(std::shared_ptr<const data::Dataset> dataset, const data::LoaderOptions& options) {
  const pipeline::SampleFormat sample = pipeline::sample_format(dataset->transform().format, data::largest_side(dataset->transform(), dataset->train()));
  ring_ = std::make_unique<pipeline::HostRing>(pipeline::ring_slots(options.prefetch_batches), options.batch_size, sample.shape,
                                               sample.dtype, /*pinned=*/false, dataset->transform().gpu_decode);
  loader_ = std::make_unique<data::Loader>(std::move(dataset), options, ring_.get());
}

LoaderOnly::~LoaderOnly() { loader_.reset(); }  // the workers go before the ring they write into

void LoaderOnly::start_epoch(int64_t epoch, int64_t first_batch) { loader_->start_epoch(epoch, first_batch); }

std::optional<pipeline::DeviceBatch> LoaderOnly::next() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto batch = loader_->next();
  if (!batch) return std::nullopt;
  loader_->recycle(*batch);  // nothing reads the pixels: the slot goes straight back
  pipeline::DeviceBatch out;
  out.index = batch->index;
  out.size = batch->size;
  out.bad_images = batch->bad_images;
  out.timing.wait_ms = out.timing.loader_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace pinfeed::app

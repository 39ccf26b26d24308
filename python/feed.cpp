#include "python/feed.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include "common/host_memory.h"
#include "data/dataset/image_folder.h"
#include "gpu/gpu.h"
#include "pipeline/resolve_feed.h"
#include "pipeline/transfer/host_ring.h"
#include "pipeline/transfer/options.h"

namespace pinfeed::python {
namespace fs = std::filesystem;

// Holds the worker that is about to load one sample, as a read that never returns would, until released.
struct Feed::Stall {
  std::mutex mutex;
  std::condition_variable cv;
  bool released = false;

  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return released; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex);
    released = true;
    cv.notify_all();
  }
};

namespace {

// scan_image_folder reads ROOT/<split>: the split is the folder's last component. Absolute, so that the paths
// in bad_images and in errors name the files wherever the caller's working directory is.
data::ImageFolder scan(const FeedOptions& o) {
  fs::path dir = fs::absolute(o.root).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // a trailing '/'
  return data::scan_image_folder(dir.parent_path().string(), dir.filename().string(),
                                 o.classes.empty() ? nullptr : &o.classes);
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1 << 30));
  return text;
}

// `pinfeed train`'s rule for its host rings (app/plan/plan.cpp), for this loader's ring on each rank of the host,
// before anything is allocated.
void check_ring_memory(const data::TransformOptions& t, const data::LoaderOptions& l, bool train) {
  const int slots = pipeline::ring_slots(l.prefetch_batches);
  const int side = data::largest_side(t, train);
  const size_t image_bytes = data::bytes_per_image(t.format, side);
  const double ring = static_cast<double>(pipeline::ring_bytes(slots, l.batch_size, image_bytes));
  const int ranks = std::max(1, l.host_ranks);
  const double memory = common::read_host_memory().total;
  if (pipeline::host_rings_fit(ring * ranks, memory)) return;
  const std::string each = ranks > 1 ? " on each of the " + std::to_string(ranks) + " ranks of this host" : "";
  throw std::invalid_argument("the host batch ring needs " + gib(ring) + each + " (prefetch_batches " +
                              std::to_string(l.prefetch_batches) + " + 2 slots of batch_size " +
                              std::to_string(l.batch_size) + " x image_size " + std::to_string(side) + " px = " +
                              gib(ring / slots) + " per batch), over half of this machine's " + gib(memory) +
                              " of memory: lower prefetch_batches, batch_size or image_size");
}

}  // namespace

Feed::Feed(FeedOptions o) : device_(o.device) {
  if (o.dtype != at::kFloat && o.dtype != at::kHalf && o.dtype != at::kByte) {
    throw std::invalid_argument("dtype must be torch.float32, torch.float16 or torch.uint8");
  }
  if (o.decoder != "auto" && o.decoder != "cpu" && o.decoder != "nvjpeg") {
    throw std::invalid_argument("decoder must be \"auto\", \"cpu\" or \"nvjpeg\", not \"" + o.decoder + "\"");
  }
  const bool cuda = o.device.is_cuda();
  // `pinfeed train`'s rules (pipeline/resolve_feed.h). The pixels cross as uint8 and are normalised on the device
  // (the GPU decoder's way, and 4x fewer bytes to copy), except for float32 batches on the CPU: normalised by the
  // workers, as `pinfeed train` on the CPU does.
  const pipeline::FeedAnswer feed = pipeline::resolve_feed(
      {o.decoder == "cpu" ? pipeline::Decoder::kCpu : o.decoder == "nvjpeg" ? pipeline::Decoder::kNvjpeg
                                                                               : pipeline::Decoder::kAuto,
       o.device, /*uint8_transfer=*/cuda || o.dtype != at::kFloat, /*pixel_ops=*/o.train && o.augment.pixel_ops(),
       /*normalised=*/o.dtype != at::kByte, /*mode_chosen=*/false});
  data::TransformOptions t = o.transform;
  t.gpu_decode = feed.gpu_decode;
  t.format = feed.format;
  check_ring_memory(t, o.loader, o.train);

  pipeline::PipelineOptions p;
  pipeline::apply_preset(pipeline::preset_of(*feed.preset), p);
  p.transfer_dtype = feed.transfer_dtype;

  pipeline::FeederOptions f;
  f.device = o.device;
  if (cuda) f.compute_stream = gpu::current_stream(o.device);  // next() names each call's own stream
  f.channels_last = o.channels_last;
  f.input_dtype = o.dtype;

  data::LoaderOptions l = o.loader;
  l.continue_into_next_epoch = o.train;  // validation re-reads its one order: nothing to start early
  if (o.stall_sample >= 0) {
    stall_ = std::make_shared<Stall>();
    l.before_load = [stall = stall_, sample = o.stall_sample](int64_t index) {
      if (index == sample) stall->wait();
    };
  }
  dataset_ = std::make_shared<data::Dataset>(scan(o), t, o.train, o.on_bad_image);
  pipeline::augment::AugmentOptions augment;  // validation batches get none
  if (o.train) {
    augment = o.augment;
    augment.num_classes = static_cast<int64_t>(dataset_->folder().classes.size());
  }
  feeder_ = std::make_unique<pipeline::Feeder>(dataset_, std::move(l), p, f, augment);
}

Feed::~Feed() { close(); }

void Feed::close() {
  release_stall();  // first: the Feeder's destructor waits for the worker it holds
  feeder_.reset();
}

void Feed::release_stall() {
  if (stall_) stall_->release();
}

pipeline::Feeder& Feed::feeder() const {
  if (!feeder_) throw std::runtime_error("this loader is closed");
  return *feeder_;
}

void Feed::start(int64_t epoch, int64_t first_batch) { feeder().start_epoch(epoch, first_batch); }

std::optional<FeedBatch> Feed::next(const std::optional<c10::Stream>& consumer) {
  pipeline::Feeder& f = feeder();
  std::optional<pipeline::DeviceBatch> b;
  if (device_.is_cuda()) {
    TORCH_CHECK(consumer, "a CUDA loader's next() needs the consumer's stream");
    b = f.next_for(*consumer);
  } else {
    b = f.next();
  }
  if (!b) return std::nullopt;
  FeedBatch out{b->images, b->labels, b->index};
  if (!device_.is_cuda()) {
    // The Feeder's CPU batch may be a view of its ring slot, recycled at the next call; Python keeps what it gets.
    if (out.images.is_alias_of(out.labels)) out.images = out.images.clone();
    out.labels = out.labels.clone();
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Feed::take_bad_images() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& b : dataset_->take_new_bad_images()) out.emplace_back(std::move(b.path), std::move(b.reason));
  return out;
}

}  // namespace pinfeed::python

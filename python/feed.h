// One ImageFolder split fed to Python: the Dataset and the pipeline::Feeder that `pinfeed train` uses, made from
// pinfeed.ImageFolderLoader's arguments (pinfeed/__init__.py). No Python here: module.cpp binds it, releases the
// GIL around its waits and answers Ctrl-C through LoaderOptions::stop_requested; the epoch bookkeeping
// (set_epoch, state_dict, a restart after an error) is the Python class's.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset/dataset.h"
#include "data/loader/loader.h"
#include "data/transform/transforms.h"
#include "pipeline/augment/options.h"
#include "pipeline/transfer/feeder.h"

namespace pinfeed::python {

struct FeedOptions {
  std::string root;                  // one split: root/<class>/<image>
  std::vector<std::string> classes;  // labels follow this list (a val split after its train split); empty: the folder's
  bool train = true;                 // RandomResizedCrop + flip; else resize + centre crop
  data::TransformOptions transform;  // its format is decided here, from device, dtype and decoder
  data::LoaderOptions loader;
  data::BadImagePolicy on_bad_image = data::BadImagePolicy::kSkip;
  std::string decoder = "auto";      // cpu | nvjpeg | auto: data.decoder's choices and rule
  c10::Device device{c10::kCPU};     // cuda:N with its index
  bool channels_last = true;
  // `pinfeed train`'s device augmentations (data.auto_augment, random erasing, Mixup/CutMix with label smoothing
  // folded into the soft targets), for training batches; num_classes is the folder's.
  pipeline::augment::AugmentOptions augment;
  c10::ScalarType dtype = c10::kFloat;  // kFloat, kHalf: normalised; kByte: the pixels as they are
  int64_t stall_sample = -1;  // test seam: a worker about to load this dataset index waits for release_stall()
};

struct FeedBatch {
  at::Tensor images;  // (B, 3, S, S) of the dtype asked for, on the device (channels_last strides if asked)
  at::Tensor labels;  // (B,) int64 on the device; with Mixup/CutMix, (B, classes) float soft targets
  int64_t index = -1;  // within the epoch
};

class Feed {
 public:
  // Scans the folder and starts the workers. Throws std::invalid_argument for options that cannot work together
  // (decoder="nvjpeg" without CUDA or nvJPEG, a host ring over half the memory, ...), DataError for a missing or
  // empty folder. The bounds of each option alone (data/limits.h) are pinfeed/__init__.py's to check.
  explicit Feed(FeedOptions options);
  ~Feed();  // releases a stalled test sample, then stops the Feeder (bounded: data::Loader::~Loader)
  Feed(const Feed&) = delete;
  Feed& operator=(const Feed&) = delete;

  // pipeline::Feeder::start_epoch.
  void start(int64_t epoch, int64_t first_batch);
  // The next batch of the epoch, nullopt at its end. On CUDA it is ready for `consumer`, the caller's current
  // stream: that stream waits for the batch's copy and decode (an event, not a host wait), and the batch's memory
  // is not reused before that stream has passed its last use (record_stream; see pinfeed/__init__.py). On the
  // CPU the tensors are the caller's own: nothing the loader reuses.
  std::optional<FeedBatch> next(const std::optional<c10::Stream>& consumer);

  int64_t batches_per_epoch() const { return feeder().batches_per_epoch(); }  // this rank's
  int64_t samples_per_epoch() const { return feeder().loader().samples_per_epoch(); }
  int64_t dataset_size() const { return dataset_->size(); }
  const std::vector<std::string>& classes() const { return dataset_->folder().classes; }
  int workers() const { return feeder().workers(); }
  bool gpu_decode() const { return dataset_->transform().gpu_decode; }
  data::PixelFormat pixel_format() const { return dataset_->transform().format; }  // how the pixels cross
  std::string mode() const { return feeder().mode(); }  // the transfer mode that runs (pipeline/transfer/options.h)
  pipeline::Feeder::QueueDepth queue_depth() const { return feeder().queue_depth(); }
  const c10::Device& device() const { return device_; }
  // Bad files found since the last call, each once: (path, reason).
  std::vector<std::pair<std::string, std::string>> take_bad_images() const;
  void release_stall();  // test seam (FeedOptions::stall_sample)
  void close();          // stops the workers now; any later call but close() throws

 private:
  struct Stall;
  pipeline::Feeder& feeder() const;  // throws once closed

  c10::Device device_;
  std::shared_ptr<Stall> stall_;
  std::shared_ptr<const data::Dataset> dataset_;
  std::unique_ptr<pipeline::Feeder> feeder_;
};

}  // namespace pinfeed::python

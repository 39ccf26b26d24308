// An image folder plus its transform: turns a sample index into pixels in a batch slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "data/image_folder.h"
#include "data/transforms.h"

namespace pinfeed::data {

enum class BadImagePolicy { kSkip, kFail };

class Dataset {
 public:
  Dataset(ImageFolder folder, TransformOptions transform, bool train, BadImagePolicy on_bad_image);

  int64_t size() const { return static_cast<int64_t>(folder_.samples.size()); }
  const ImageFolder& folder() const { return folder_; }
  const TransformOptions& transform() const { return transform_; }
  bool train() const { return train_; }
  size_t image_bytes() const { return bytes_per_image(transform_.format, transform_.size); }

  // Writes sample `index` of `epoch` into dst and its label into *label. A bad image is replaced by another
  // sample chosen from the same seed (policy skip) or raises (policy fail); returns the number replaced.
  // Errors name the sample's path.
  int load(int64_t index, uint64_t seed, int64_t epoch, void* dst, int64_t* label, DecodeScratch& scratch) const;

  int64_t bad_images() const { return bad_images_.load(); }

 private:
  void load_one(int64_t index, uint64_t seed, int64_t epoch, void* dst, DecodeScratch& scratch) const;

  ImageFolder folder_;
  TransformOptions transform_;
  bool train_;
  BadImagePolicy on_bad_image_;
  mutable std::atomic<int64_t> bad_images_{0};
};

}  // namespace pinfeed::data

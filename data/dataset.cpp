#include "data/dataset.h"

#include <optional>
#include <stdexcept>

#include "data/error.h"
#include "common/log.h"

namespace pinfeed::data {
namespace {
constexpr int kMaxReplacements = 16;
constexpr int64_t kLoggedBadImages = 20;  // distinct files; then only the count
}  // namespace

Dataset::Dataset(ImageFolder folder, TransformOptions transform, bool train, BadImagePolicy on_bad_image)
    : folder_(std::move(folder)), transform_(transform), train_(train), on_bad_image_(on_bad_image) {}

void Dataset::load_one(int64_t index, uint64_t seed, int64_t epoch, void* dst, DecodeScratch& scratch) const {
  SampleRng rng(stream_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
  read_file(folder_.samples[index].path, scratch.file);
  decode_into(scratch.file.data(), scratch.file.size(), train_, transform_, rng, scratch, dst);
}

int64_t Dataset::record_bad_image(int64_t index, const std::string& reason) const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  if (!bad_seen_.insert(index).second) return 0;
  bad_new_.push_back({folder_.samples[index].path, reason});
  return static_cast<int64_t>(bad_seen_.size());
}

int64_t Dataset::distinct_bad_images() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  return static_cast<int64_t>(bad_seen_.size());
}

std::vector<BadImage> Dataset::take_new_bad_images() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  std::vector<BadImage> out;
  out.swap(bad_new_);
  return out;
}

int Dataset::load(int64_t index, uint64_t seed, int64_t epoch, void* dst, int64_t* label,
                  DecodeScratch& scratch) const {
  std::optional<SampleRng> replacement_rng;  // seeded only when an image turns out bad
  int64_t current = index;
  for (int replaced = 0; replaced <= kMaxReplacements; ++replaced) {
    try {
      load_one(current, seed, epoch, dst, scratch);
      *label = folder_.samples[current].label;
      return replaced;
    } catch (const std::exception& e) {
      const std::string& path = folder_.samples[current].path;
      const int64_t n = record_bad_image(current, e.what());  // 0: seen before
      if (on_bad_image_ == BadImagePolicy::kFail) {
        throw DataError("bad image " + path + ": " + e.what() + " (data.on_bad_image = \"fail\")");
      }
      if (n > 0 && n <= kLoggedBadImages) {
        log::warn("bad image " + path + ": " + e.what() + "; replaced by another sample" +
                  (n == kLoggedBadImages ? " (further bad images are only counted)" : ""));
      }
      // Another sample than the one that just failed (the same seed picks the same one on every run).
      if (!replacement_rng) replacement_rng.emplace(stream_seed(seed, epoch, index, 0xBAD));
      if (size() > 1) current = (current + 1 + replacement_rng->below(size() - 1)) % size();
    }
  }
  throw DataError("more than " + std::to_string(kMaxReplacements) + " bad images in a row replacing " +
                  folder_.samples[index].path + "; is the dataset readable?");
}

}  // namespace pinfeed::data

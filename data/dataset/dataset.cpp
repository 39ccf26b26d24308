#include "data/dataset/dataset.h"

#include <optional>
#include <stdexcept>
#include <thread>

#include "common/log.h"
#include "data/error.h"
#include "data/jpeg/jpeg_check.h"

namespace pinfeed::data {
namespace {
constexpr int kMaxReplacements = 16;
constexpr int64_t kLoggedBadImages = 20;  // distinct files; then only the count
// Larger JPEGs are decoded on the CPU: bounds one image's decode buffer on the GPU at 48 MB (RGB).
constexpr int64_t kMaxGpuPixels = int64_t{4096} * 4096;
}  // namespace

bool gpu_takes(int64_t index, double share) {
  if (share >= 1) return true;
  // The index hashed with a constant of its own ("gpu_shar"): a uniform draw in [0, 1), independent of the seed.
  const double u = static_cast<double>(mix64(static_cast<uint64_t>(index) ^ 0x6770755f73686172ULL) >> 11) * 0x1.0p-53;
  return u < share;
}

Dataset::Dataset(ImageFolder folder, TransformOptions transform, bool train, BadImagePolicy on_bad_image)
    : folder_(std::move(folder)), transform_(transform), train_(train), on_bad_image_(on_bad_image) {
  if (train_) {
    for (int side : transform_.schedule.all_sides(transform_.size)) at_side_.push_back(at_side(transform_, side));
  } else {
    at_side_.push_back(at_side(transform_, side_of(transform_, false, 0)));
  }
  if (transform_.gpu_decode) {
    if (transform_.format != PixelFormat::kUint8Hwc) throw std::invalid_argument("GPU decode needs uint8 pixels");
    checked_ = std::make_unique<std::atomic<int64_t>[]>(folder_.samples.size());
    for (size_t i = 0; i < folder_.samples.size(); ++i) checked_[i].store(0, std::memory_order_relaxed);
  }
}

const TransformOptions& Dataset::transform_at(int64_t epoch) const {
  const int s = side(epoch);
  for (const auto& t : at_side_) {
    if (t.size == s) return t;
  }
  throw std::logic_error("Dataset: no transform at side " + std::to_string(s));
}

JpegRoute Dataset::checked_gpu_kind(int64_t index, const std::vector<uint8_t>& file, JpegInfo* info,
                                    std::vector<uint8_t>& row, std::atomic<int64_t>* runs) const {
  // A file checked before at this size keeps its decoder: no second pass over its entropy data to count scans.
  const int64_t size_tag = (static_cast<int64_t>(file.size()) + 1) << 2;
  const int64_t known = checked_[index].load(std::memory_order_acquire);
  const bool checked = (known & ~int64_t{3}) == size_tag;
  if (!parse_jpeg_info(file.data(), file.size(), info, /*count_scans=*/!checked)) return JpegRoute::kCpu;  // PNG
  const std::string too_big = pixel_limit_error(info->width, info->height, transform_.max_image_pixels);
  if (!too_big.empty()) throw std::runtime_error(too_big);
  const JpegRoute kind = checked ? static_cast<JpegRoute>(known & 3) : gpu_decode_for(*info, kMaxGpuPixels);
  if (kind == JpegRoute::kCpu || checked) return kind;
  runs->fetch_add(1, std::memory_order_relaxed);
  check_jpeg(file.data(), file.size(), transform_.max_image_pixels, row);  // throws if bad
  // A worker and a CheckAhead thread may both get here for one file: they store the same tag.
  checked_[index].store(size_tag | static_cast<int64_t>(kind), std::memory_order_release);
  return kind;
}

bool Dataset::stage_for_gpu(int64_t index, const TransformOptions& t, SampleRng& rng, DecodeScratch& scratch,
                            EncodedImage* encoded) const {
  if (!gpu_takes(index, t.nvjpeg_share)) return false;
  JpegInfo info;
  const JpegRoute kind = checked_gpu_kind(index, encoded->bytes, &info, scratch.region, &checks_in_load_);
  if (kind == JpegRoute::kCpu) return false;
  encoded->kind = kind;
  encoded->width = info.width;
  encoded->height = info.height;
  encoded->box = train_ ? sample_train_crop(info.width, info.height, t, rng) : val_crop(info.width, info.height, t);
  encoded->reduction = t.crop_decode ? reduction_for(encoded->box, t.size) : 1;
  return true;
}

void Dataset::load_one(int64_t index, uint64_t seed, int64_t epoch, void* dst, DecodeScratch& scratch,
                       EncodedImage* encoded) const {
  SampleRng rng(stream_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
  const TransformOptions& t = transform_at(epoch);
  if (encoded) {
    encoded->kind = JpegRoute::kCpu;
    read_file(folder_.samples[index].path, encoded->bytes, t.max_file_bytes);
    if (stage_for_gpu(index, t, rng, scratch, encoded)) return;
    decode_into(encoded->bytes.data(), encoded->bytes.size(), train_, t, rng, scratch, dst);
    return;
  }
  read_file(folder_.samples[index].path, scratch.file, t.max_file_bytes);
  decode_into(scratch.file.data(), scratch.file.size(), train_, t, rng, scratch, dst);
}

bool Dataset::check_gpu_file(int64_t index, DecodeScratch& scratch) const {
  if (!checked_ || !gpu_takes(index, transform_.nvjpeg_share)) return false;
  if (checked_[index].load(std::memory_order_acquire) != 0) return true;
  try {
    read_file(folder_.samples[index].path, scratch.file, transform_.max_file_bytes);
    JpegInfo info;
    return checked_gpu_kind(index, scratch.file, &info, scratch.region, &checks_ahead_) != JpegRoute::kCpu;
  } catch (const std::exception&) {
    // Left unchecked: load() meets it again, then names, counts and replaces it as on the CPU path.
    return false;
  }
}

void Dataset::check_gpu_files(int threads) const {
  if (!checked_) return;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    DecodeScratch scratch;
    for (int64_t i = next++; i < size(); i = next++) check_gpu_file(i, scratch);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

Dataset::GpuChecks Dataset::gpu_checks() const {
  return {checks_ahead_.load(std::memory_order_relaxed), checks_in_load_.load(std::memory_order_relaxed)};
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

int Dataset::load(int64_t index, uint64_t seed, int64_t epoch, void* dst, int64_t* label, DecodeScratch& scratch,
                  EncodedImage* encoded) const {
  if (transform_.gpu_decode != (encoded != nullptr)) {
    throw std::logic_error("Dataset::load: an EncodedImage is needed exactly when the GPU decodes");
  }
  std::optional<SampleRng> replacement_rng;  // seeded only when an image turns out bad
  int64_t current = index;
  for (int replaced = 0; replaced <= kMaxReplacements; ++replaced) {
    try {
      load_one(current, seed, epoch, dst, scratch, encoded);
      *label = folder_.samples[current].label;
      return replaced;
    } catch (const std::exception& e) {
      const std::string path = printable(folder_.samples[current].path);
      const int64_t n = record_bad_image(current, e.what());  // 0: seen before
      if (on_bad_image_ == BadImagePolicy::kFail) {
        throw DataError("bad image " + path + ": " + printable(e.what()) + " (data.on_bad_image = \"fail\")");
      }
      if (n > 0 && n <= kLoggedBadImages) {
        log::warn("bad image " + path + ": " + printable(e.what()) + "; replaced by another sample" +
                  (n == kLoggedBadImages ? " (further bad images are only counted)" : ""));
      }
      // Another sample than the one that just failed (the same seed picks the same one on every run).
      if (!replacement_rng) replacement_rng.emplace(stream_seed(seed, epoch, index, 0xBAD));
      if (size() > 1) current = (current + 1 + replacement_rng->below(size() - 1)) % size();
    }
  }
  throw DataError("more than " + std::to_string(kMaxReplacements) + " bad images in a row replacing " +
                  printable(folder_.samples[index].path) + "; is the dataset readable?");
}

}  // namespace pinfeed::data

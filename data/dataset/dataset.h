// An image folder plus its transform: turns a sample index into pixels in a batch slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "data/transform/encoded_image.h"
#include "data/dataset/image_folder.h"
#include "data/transform/transforms.h"

namespace pinfeed::data {

enum class BadImagePolicy { kSkip, kFail };

// A file that could not be read or decoded (see decode_into for what counts as bad).
struct BadImage {
  std::string path;
  std::string reason;  // the reader's or decoder's message, e.g. "libjpeg: Premature end of JPEG file"
};

// Whether sample `index` is one the GPU may decode when TransformOptions::nvjpeg_share is `share`: a fixed draw
// per index, true for about that fraction of indices.
bool gpu_takes(int64_t index, double share);

class Dataset {
 public:
  Dataset(ImageFolder folder, TransformOptions transform, bool train, BadImagePolicy on_bad_image);

  int64_t size() const { return static_cast<int64_t>(folder_.samples.size()); }
  const ImageFolder& folder() const { return folder_; }
  const TransformOptions& transform() const { return transform_; }  // as given, with its schedule
  bool train() const { return train_; }
  int side(int64_t epoch) const { return side_of(transform_, train_, epoch); }  // of the samples of `epoch`
  // What samples of `epoch` are decoded with: transform() at that epoch's side.
  const TransformOptions& transform_at(int64_t epoch) const;
  size_t image_bytes(int64_t epoch) const { return bytes_per_image(transform_.format, side(epoch)); }
  // The largest side's: what batch memory is sized for.
  size_t image_bytes() const { return bytes_per_image(transform_.format, largest_side(transform_, train_)); }

  // Writes sample `index` of `epoch` into dst and its label into *label. A bad image is recorded (below), then
  // replaced by another sample chosen from the same seed (policy skip) or raises DataError naming the file and
  // the reason (policy fail). Returns the number of bad loads on the way: a replacement that is also bad counts
  // too, and a bad file counts again each time it is loaded. Thread-safe: workers call it concurrently.
  // With transform().gpu_decode, a JPEG the GPU takes is not decoded: its bytes, size, crop box and decoder go
  // to *encoded (required then) and dst is left alone; anything else is decoded into dst (encoded->kind kCpu).
  // A file meant for the GPU is first checked once per run on the CPU (check_jpeg: the same policy as decoding
  // it here), so that bad files are found, named and replaced exactly as on the CPU path: here, unless
  // check_gpu_file passed it before.
  // A null dst leaves the CPU-decoded pixels in scratch for write_resized (decode_into says why).
  int load(int64_t index, uint64_t seed, int64_t epoch, void* dst, int64_t* label, DecodeScratch& scratch,
           EncodedImage* encoded = nullptr) const;
  // Checks sample `index`'s file now, as load() would before handing it to the GPU, so that load() finds it
  // checked and only reads it: true if it is checked (now or before), false for a file the GPU does not take or a
  // bad one. A bad file is left unchecked and unrecorded: load() meets it again and names, counts and replaces it
  // as on the CPU path. Thread-safe, also while a worker loads the same sample (both may then check it: the same
  // verdict twice, never a second record). The Loader's CheckAhead threads call it (data/loader/check_ahead.h).
  bool check_gpu_file(int64_t index, DecodeScratch& scratch) const;
  // check_gpu_file for every sample, with `threads` threads (the bench calls it so that its rows time the
  // steady state, not the first pass).
  void check_gpu_files(int threads) const;
  // libjpeg checks run so far for the GPU path: by check_gpu_file, and inside load() (a worker checking a file
  // that was not checked ahead, or a bad file again). A bad file counts each time it is checked.
  struct GpuChecks {
    int64_t ahead = 0;
    int64_t in_load = 0;
  };
  GpuChecks gpu_checks() const;

  // Bad files are recorded once each, with the reason of their first failure, however often they are loaded
  // (every epoch, or as a replacement of another bad file). Both calls are thread-safe and may run while
  // workers load.
  // The number of distinct bad files found so far.
  int64_t distinct_bad_images() const;
  // The bad files found since the previous call, each once, in the order found; the caller owns them (the app
  // appends them to bad_images.tsv in the run folder). Files found before still count in distinct_bad_images().
  std::vector<BadImage> take_new_bad_images() const;

 private:
  void load_one(int64_t index, uint64_t seed, int64_t epoch, void* dst, DecodeScratch& scratch,
                EncodedImage* encoded) const;
  // Leaves the file in encoded->bytes for the GPU if it takes it (true), checking it once first; else false.
  bool stage_for_gpu(int64_t index, const TransformOptions& t, SampleRng& rng, DecodeScratch& scratch,
                     EncodedImage* encoded) const;
  // The GPU decoder of sample `index`, whose file is `file`, read just now (kCpu: the CPU decodes it), with its
  // header in *info; checks the file first unless it was checked at this size, counting the check in *runs.
  // Throws for a bad file.
  JpegRoute checked_gpu_kind(int64_t index, const std::vector<uint8_t>& file, JpegInfo* info,
                             std::vector<uint8_t>& row, std::atomic<int64_t>* runs) const;
  // Records sample `index` as bad; returns the number of distinct bad files if it is new, else 0.
  int64_t record_bad_image(int64_t index, const std::string& reason) const;

  ImageFolder folder_;
  TransformOptions transform_;
  bool train_;
  std::vector<TransformOptions> at_side_;  // at_side(transform_, s) for every side s an epoch may get
  BadImagePolicy on_bad_image_;
  mutable std::mutex bad_mutex_;                 // guards the two below
  mutable std::unordered_set<int64_t> bad_seen_;  // sample indices found bad
  mutable std::vector<BadImage> bad_new_;         // found since the last take_new_bad_images()
  // gpu_decode: per sample, (the file's size + 1) << 2 | its JpegRoute, once check_jpeg passed it (0: not
  // checked). Files are read again every epoch: one that changed size since is classified and checked again (a
  // change keeping the size is not seen).
  // Kept for this run only, not in a cache across runs: a key of path, size and mtime would trust a file
  // rewritten in place within the mtime's resolution, or copied back with its old mtime (cp -p, rsync -t, tar),
  // and a verdict reached by another libjpeg or another max_image_pixels. The check's cost is hidden instead, on
  // the cores the workers leave idle (CheckAhead).
  std::unique_ptr<std::atomic<int64_t>[]> checked_;
  mutable std::atomic<int64_t> checks_ahead_{0}, checks_in_load_{0};  // GpuChecks
};

}  // namespace pinfeed::data

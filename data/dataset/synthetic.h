// A learnable synthetic ImageFolder written as real JPEG files: each class is a family of shapes, colours
// and textures, drawn with random placement, scale, rotation and noise so that it is not trivial.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pinfeed::data {

struct SyntheticOptions {
  // Each side in [kMinSide, kMaxSide]: 8192 x 8192 is the largest square under the loader's default
  // data.max_image_pixels (100 M), so every file written can be trained on as it is.
  static constexpr int kMinSide = 8, kMaxSide = 8192;

  std::string out;         // writes out/train/<class>/*.jpg and out/val/<class>/*.jpg
  int classes = 10;
  int train_per_class = 100;
  int val_per_class = 20;
  int width = 64, height = 64;
  // photo: ImageNet-like files (textured, noisy; ~100-150 KB at 500x375), for benchmarks of the input path.
  bool photo = false;
  int quality = 90;
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores; fewer where their images would not fit 2 GiB together
};

// What tells a class apart: its shape (of 8), hue (of 12) and background family (of 4: distractor strokes). Distinct
// for the first 384 classes, then repeating; the first 24 classes look as they did when hue and shape both ran
// with the label (so the quickstart's dataset is unchanged).
struct SyntheticLook {
  int shape = 0, hue = 0, family = 0;
  bool operator==(const SyntheticLook& o) const { return shape == o.shape && hue == o.hue && family == o.family; }
};
SyntheticLook synthetic_look(int label);

// A folder or file under SyntheticOptions::out could not be made (a full disk, no permission, a folder in the
// way): an output error, not bad input data.
class SyntheticWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Returns the number of files written. Throws std::invalid_argument for a side outside [kMinSide, kMaxSide] and
// SyntheticWriteError when a folder or file cannot be made; any error of an encoder thread is rethrown here, on
// the caller's thread, after every thread has stopped.
int64_t generate_synthetic(const SyntheticOptions& options);

}  // namespace pinfeed::data

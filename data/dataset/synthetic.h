// A learnable synthetic ImageFolder written as real JPEG files: each class is a family of shapes, colours
// and textures, drawn with random placement, scale, rotation and noise so that it is not trivial.
#pragma once

#include <cstdint>
#include <string>

namespace pinfeed::data {

struct SyntheticOptions {
  std::string out;         // writes out/train/<class>/*.jpg and out/val/<class>/*.jpg
  int classes = 10;
  int train_per_class = 100;
  int val_per_class = 20;
  int width = 64, height = 64;
  // photo: ImageNet-like files (textured, noisy; ~100-150 KB at 500x375), for benchmarks of the input path.
  bool photo = false;
  int quality = 90;
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
};

// What tells a class apart: its shape (of 8), hue (of 12) and background family (of 4: distractor strokes). Distinct
// for the first 384 classes, then repeating; the first 24 classes look as they did when hue and shape both ran
// with the label (so the quickstart's dataset is unchanged).
struct SyntheticLook {
  int shape = 0, hue = 0, family = 0;
  bool operator==(const SyntheticLook& o) const { return shape == o.shape && hue == o.hue && family == o.family; }
};
SyntheticLook synthetic_look(int label);

// Returns the number of files written. Throws DataError when a file cannot be written.
int64_t generate_synthetic(const SyntheticOptions& options);

}  // namespace pinfeed::data

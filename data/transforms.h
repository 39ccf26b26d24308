// Decode + augment one image straight into its place in a batch buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

#include "data/sample_rng.h"

namespace pinfeed::data {

// How samples are laid out in batch memory.
enum class PixelFormat {
  kFloat32Chw,  // (3, S, S) float32, normalised with mean/std on the host (ToTensor + Normalize)
  kUint8Hwc,    // (S, S, 3) uint8 RGB, normalised on the device
};

size_t bytes_per_image(PixelFormat format, int size);

struct TransformOptions {
  int size = 224;                 // output side in pixels
  double val_resize_ratio = 0.875;  // val: resize the shorter side to size / ratio, then centre crop
  double scale_min = 0.08, scale_max = 1.0;  // RandomResizedCrop area range
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  bool hflip = true;
  // JPEGs: decode only the crop's region with libjpeg-turbo, at 1/2, 1/4, 1/8 DCT scale when the crop allows.
  // Off: OpenCV decodes the whole image first (the reference path).
  bool crop_decode = true;
  PixelFormat format = PixelFormat::kFloat32Chw;
  float mean[3] = {0.485f, 0.456f, 0.406f};  // ImageNet, RGB
  float std[3] = {0.229f, 0.224f, 0.225f};
};

struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;  // in source pixels
  bool flip = false;
};

// torchvision RandomResizedCrop.get_params (+ a flip draw), same algorithm and fallback.
CropBox sample_train_crop(int width, int height, const TransformOptions& options, SampleRng& rng);
// Resize shorter side to size/ratio then centre crop `size`, expressed as one box in source pixels.
CropBox val_crop(int width, int height, const TransformOptions& options);

// Width and height from a JPEG (SOFn) or PNG (IHDR) header without decoding; false if not found.
bool peek_image_size(const uint8_t* data, size_t size, int* width, int* height);
// A JPEG that lacks its end-of-image marker was cut short (libjpeg would pad it silently).
bool jpeg_looks_truncated(const uint8_t* data, size_t size);

// Per-worker buffers reused from sample to sample: no heap allocation per sample once warm.
struct DecodeScratch {
  std::vector<uint8_t> file;
  std::vector<uint8_t> region;  // pixels of the decoded crop region (grows only)
  cv::Mat decoded, resized;
};

// Decodes `file` (bytes of a JPEG/PNG), crops, resizes, flips and writes to dst in options.format.
// train: random crop from rng; else: val crop. Throws std::runtime_error on undecodable data.
void decode_into(const uint8_t* file, size_t file_size, bool train, const TransformOptions& options,
                 SampleRng& rng, DecodeScratch& scratch, void* dst);

// Reads a whole file into `out`; throws std::runtime_error with the OS error.
void read_file(const std::string& path, std::vector<uint8_t>& out);

}  // namespace pinfeed::data

// Decode + augment one image straight into its place in a batch buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

#include "data/geometry.h"  // CropBox, reduction_for, scaled_crop, pixel_limit_error
#include "data/transform/sample_rng.h"
#include "data/transform/side_schedule.h"

namespace pinfeed::data {

// How samples are laid out in batch memory.
enum class PixelFormat {
  kFloat32Chw,  // (3, S, S) float32, normalised with mean/std on the host (ToTensor + Normalize)
  kUint8Hwc,    // (S, S, 3) uint8 RGB, normalised on the device
};

size_t bytes_per_image(PixelFormat format, int size);

struct TransformOptions {
  int size = 224;                   // output side in pixels: training's when `schedule` is off, validation's by default
  SideSchedule schedule;            // training's side by epoch
  int val_size = 0;                 // validation's side; 0: size
  double val_resize_ratio = 0.875;  // val: resize the shorter side to side / ratio, then centre crop
  double scale_min = 0.08, scale_max = 1.0;  // RandomResizedCrop area range
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  bool hflip = true;
  // JPEGs: decode only the crop's region with libjpeg-turbo, at 1/2, 1/4, 1/8 DCT scale when the crop allows.
  // Off: the whole image is decoded first (the reference path; OpenCV's pixels, see decode_into).
  bool crop_decode = true;
  // Images whose header declares more pixels than this are refused before any pixel memory is allocated, as bad
  // images (data.on_bad_image applies). A 1 KB file can claim 30000x30000 and cost seconds and gigabytes per
  // decode. 100 MP is well above the camera photos of ImageNet-like datasets and bounds a full decode at 300 MB
  // of BGR per worker (Pillow refuses at 179 MP, 2x its warning level; we leave less room). 0: no limit.
  int64_t max_image_pixels = 100'000'000;
  // Files larger than this are refused from their size, before a byte is read, as bad images: a file is read whole
  // into memory, so a multi-gigabyte file (or a sparse one) would otherwise cost its size per worker. 256 MiB is
  // far above any 100 MP JPEG or PNG a camera writes. 0: no limit.
  int64_t max_file_bytes = int64_t{256} << 20;
  PixelFormat format = PixelFormat::kFloat32Chw;
  // data.decoder = "nvjpeg": JPEGs the GPU takes are left encoded for it (Dataset::load fills an EncodedImage),
  // the rest are decoded here as usual. Needs format kUint8Hwc: those cross as uint8, and the device's one kernel
  // normalises them with the GPU-decoded ones into the model's input.
  bool gpu_decode = false;
  // With gpu_decode: the fraction of samples whose JPEGs the GPU may take, chosen by sample index (the same
  // samples every epoch and on every rank); the workers decode the others. Fewer images per batch for nvJPEG means
  // fewer of its per-image driver calls beside the training step's launches (DALI's hw_decoder_load).
  double nvjpeg_share = 1.0;
  float mean[3] = {0.485f, 0.456f, 0.406f};  // ImageNet, RGB
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// The side the samples of `epoch` are made at (training follows the schedule, validation keeps val_size), and the
// largest any epoch gets: what batch memory is sized for.
int side_of(const TransformOptions& options, bool train, int64_t epoch);
int largest_side(const TransformOptions& options, bool train);
// The options with `side` as their one size: what one epoch's samples are decoded with.
TransformOptions at_side(TransformOptions options, int side);

// A uint8 pixel p of channel c normalised, (p / 255 - mean[c]) / std[c], as p * scale[c] + shift[c]: one multiply
// and one add on the device (the Feeder's uint8 path and the GPU decoder's kernel compute it the same way).
struct PixelAffine {
  float scale[3], shift[3];
};
PixelAffine uint8_normalisation(const TransformOptions& options);

// torchvision RandomResizedCrop.get_params (+ a flip draw), same algorithm and fallback.
CropBox sample_train_crop(int width, int height, const TransformOptions& options, SampleRng& rng);
// Resize shorter side to size/ratio then centre crop `size`, expressed as one box in source pixels.
CropBox val_crop(int width, int height, const TransformOptions& options);

// Width and height from a JPEG (SOFn) or PNG (IHDR) header without decoding; false if not found.
bool peek_image_size(const uint8_t* data, size_t size, int* width, int* height);

// Per-worker buffers reused from sample to sample: no heap allocation per sample once warm.
struct DecodeScratch {
  std::vector<uint8_t> file;
  std::vector<uint8_t> region;  // pixels libjpeg decodes: the crop's region, or the whole image (grows only)
  cv::Mat decoded, resized;
  bool flip = false;  // after a decode with a null dst: whether write_resized mirrors `resized`
};

// Decodes `file` (bytes of a JPEG/PNG), crops, resizes, flips and writes to dst in options.format.
// train: random crop from rng; else: val crop. Throws std::runtime_error, with the reason, on a bad file:
// - neither a JPEG nor a PNG by its first bytes (the folder scan lists only .jpg, .jpeg, .png; a PNG named .jpg
//   is fine), so that every accepted file has a size to check against max_image_pixels before decoding;
// - a header over options.max_image_pixels (checked before any pixel memory is allocated);
// - a JPEG on which libjpeg reports an error or any warning anywhere in the file, not only in the crop:
//   truncation (with or without the end-of-image marker put back), bad Huffman codes, extraneous bytes, bad
//   SOS parameters. The same check runs on every path (crop-region decode, full decode, CMYK via OpenCV).
//   Bytes after the end-of-image marker are accepted: libjpeg stops there and some writers append data;
// - a PNG on which libpng reports an error (the reason is "libpng: <its message>"; libpng's warnings are
//   ignored, as OpenCV ignores them), or whose decoded size disagrees with its header.
// A null dst leaves the sample in scratch (resized, flip) for write_resized: a loader worker writes into a batch
// slot only once it knows the slot is still its to write (data/loader/loader_shared.h), at no extra cost.
void decode_into(const uint8_t* file, size_t file_size, bool train, const TransformOptions& options,
                 SampleRng& rng, DecodeScratch& scratch, void* dst);

// A whole PNG as 8-bit BGR, the pixels cv::imdecode(IMREAD_COLOR) gives, through libpng with pinfeed's own error
// handlers: nothing printed, and a bad file throws std::runtime_error("libpng: <its message>"). Warnings are
// ignored, as OpenCV ignores them.
void decode_png(const uint8_t* file, size_t file_size, cv::Mat& out);

// Writes to dst what a decode with a null dst left in scratch: the very bytes that decode would have written.
void write_resized(const DecodeScratch& scratch, const TransformOptions& options, void* dst);

// decode_into with the crop already drawn from the header's size: the GPU path's CPU fallback, for a file the GPU
// decoder did not take. Same checks and errors, and "unreadable image header" when the header gives no size.
void decode_box_into(const uint8_t* file, size_t file_size, const CropBox& box, const TransformOptions& options,
                     DecodeScratch& scratch, void* dst);

// Reads a whole regular file into `out`; throws std::runtime_error with the OS error, for anything that is not a
// regular file (a FIFO, a device, a socket: reading one could block for ever or never end), and for a file over
// max_bytes (0: no limit) before reading it.
void read_file(const std::string& path, std::vector<uint8_t>& out, int64_t max_bytes = 0);

}  // namespace pinfeed::data

// GPU JPEG decode (data.decoder = "nvjpeg"): a batch's JPEGs, left encoded by the loader's workers
// (data::EncodedImage), are decoded by nvJPEG; each one's crop is resized, flipped and normalised straight into
// the model's float32 input, and so are the pixels the CPU decoded for the rest of the batch. No CUDA types here:
// the nvJPEG code is in cuda/jpeg_decoder.cpp, the resize kernel in cuda/crop_resize.cu.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <string>

#include "data/transform/encoded_image.h"
#include "data/transform/transforms.h"

namespace pinfeed::pipeline {

struct JpegDecodeStats {  // since construction
  int64_t hardware = 0;      // images decoded by the hardware engines (batched)
  int64_t hybrid = 0;        // by nvJPEG's hybrid decoder, one at a time
  int64_t cpu_fallback = 0;  // meant for the GPU but refused by nvJPEG: decoded on the CPU (decode_box_into)
  int64_t peak_buffer_bytes = 0;  // largest decode buffer of a chunk (RGB of each image's crop, or of the whole image)
  int pool_images = 0, pool_width = 0, pool_height = 0;  // what nvJPEG's hardware decoder pool is sized for
  bool hardware_backend = false;  // the hardware engines exist on this GPU
};

// "N images on the hardware engines, N hybrid, N refused and decoded on the CPU; decode buffer peak X MB[; hardware
// pool for N images of WxH]"
inline std::string describe(const JpegDecodeStats& s) {
  const int64_t tenths_mb = (s.peak_buffer_bytes * 10 + (1 << 19)) >> 20;
  return std::to_string(s.hardware) + " images on the hardware engines, " + std::to_string(s.hybrid) + " hybrid, " +
         std::to_string(s.cpu_fallback) + " refused and decoded on the CPU; decode buffer peak " +
         std::to_string(tenths_mb / 10) + "." + std::to_string(tenths_mb % 10) + " MB" +
         (s.pool_images > 0 ? "; hardware pool for " + std::to_string(s.pool_images) + " images of " +
                                  std::to_string(s.pool_width) + "x" + std::to_string(s.pool_height)
                            : "");
}

class JpegDecoder {
 public:
  // Empty when nvJPEG can decode on this machine; else why not (built without it, no CUDA device).
  static std::string unavailable_reason();
  // data.decoder's rule, for `pinfeed` and the Python module alike: why nvJPEG cannot decode for `device` ("needs a
  // CUDA device (device is cpu)", "cannot run: ..."), empty when it can. "auto" takes nvJPEG when this is
  // empty; "nvjpeg" refuses with it.
  static std::string problem_on(c10::Device device);

  // transform: the dataset's (crop_decode, mean, std; each batch's side is its pixels'). budget_bytes: bound on one chunk's decode buffer, counted
  // as the full-size RGB of its images (the buffer itself is smaller where only crops are decoded); a batch over it
  // is decoded in several chunks.
  JpegDecoder(c10::Device device, const data::TransformOptions& transform, int64_t budget_bytes = int64_t{512} << 20);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Issues on `stream` the batch's model input out[0, count): (count, 3, S, S), or (count, 4, S, S) with a zero
  // fourth channel, float32 or float16, on the device, contiguous or channels_last, normalised with the
  // transform's mean and std; or (count, 3, S, S) uint8, the pixels themselves (a Feeder that augments them
  // normalises them after). Every images[i] whose kind is not kCpu is
  // decoded by nvJPEG; the others are read from pixels[i], where the CPU's uint8 pixels already are (pixels:
  // (B >= count, S, S, 3) uint8, contiguous, on the device; a file nvJPEG refuses is decoded on the CPU into its
  // place there too). The host returns once the work is issued (and nvJPEG's host-side parsing done); buffers are
  // stream-ordered, and a call on another stream than the last one's waits on the device for that one's work.
  // Throws std::runtime_error only if even the CPU fallback fails for a file (libjpeg checked it before). Called
  // from one thread at a time.
  void decode(const data::EncodedImage* images, int64_t count, const at::Tensor& pixels, const at::Tensor& out,
              const c10::Stream& stream);

  JpegDecodeStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

inline std::string JpegDecoder::problem_on(c10::Device device) {
  if (!device.is_cuda()) return "needs a CUDA device (device is " + device.str() + ")";
  const std::string why = unavailable_reason();
  return why.empty() ? why : "cannot run: " + why;
}

}  // namespace pinfeed::pipeline

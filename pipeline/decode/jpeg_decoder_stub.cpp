// JpegDecoder where nvJPEG is not built in (a LibTorch without CUDA, or no nvjpeg.h/libnvjpeg found).
#include "pipeline/decode/jpeg_decoder.h"

#include <stdexcept>

#include "gpu/gpu.h"

namespace pinfeed::pipeline {

struct JpegDecoder::Impl {};

std::string JpegDecoder::unavailable_reason() {
  return compiled_with_cuda() ? "pinfeed was built without nvJPEG (no nvjpeg.h / libnvjpeg found at configure)"
                              : "pinfeed was built against a LibTorch without CUDA";
}

JpegDecoder::JpegDecoder(c10::Device, const data::TransformOptions&, int64_t) {
  throw std::runtime_error("nvJPEG unavailable: " + unavailable_reason());
}
JpegDecoder::~JpegDecoder() = default;
void JpegDecoder::decode(const data::EncodedImage*, int64_t, const at::Tensor&, const at::Tensor&, const c10::Stream&) {
  throw std::runtime_error("nvJPEG unavailable: " + unavailable_reason());
}
JpegDecodeStats JpegDecoder::stats() const { return {}; }

}  // namespace pinfeed::pipeline

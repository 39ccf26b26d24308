#include "pipeline/resolve_feed.h"

#include <stdexcept>

#include "pipeline/decode/jpeg_decoder.h"

namespace pinfeed::pipeline {

FeedAnswer resolve_feed(const FeedAsk& ask) {
  FeedAnswer a;
  // nvJPEG decodes to uint8 and normalises on the GPU; a consumer of raw pixels gets none of that.
  if (ask.decoder != Decoder::kCpu) {
    const std::string problem = !ask.normalised ? "writes normalised pixels (float16 or float32), not uint8"
                                                : JpegDecoder::problem_on(ask.device);
    if (ask.decoder == Decoder::kNvjpeg && !problem.empty()) {
      throw std::invalid_argument("data.decoder = \"nvjpeg\" " + problem);
    }
    a.gpu_decode = problem.empty();
  }
  // auto_augment's ops are torchvision's uint8 ones, applied on the device before the normalisation.
  if (ask.uint8_transfer) a.uint8_because = Uint8Because::kAsked;
  else if (a.gpu_decode) a.uint8_because = Uint8Because::kGpuDecoder;
  else if (ask.pixel_ops) a.uint8_because = Uint8Because::kPixelOps;
  a.transfer_dtype = a.uint8_because ? TransferDtype::kUint8 : TransferDtype::kFloat32;
  a.format = a.uint8_because ? data::PixelFormat::kUint8Hwc : data::PixelFormat::kFloat32Chw;
  // The mode measured fastest on CUDA (docs/transfer-modes.md); the CPU has no transfer to overlap.
  if (!ask.mode_chosen) a.preset = ask.device.is_cuda() ? Mode::kDualStream : Mode::kPageable;
  return a;
}

}  // namespace pinfeed::pipeline

// The feed's "auto" answers, one rule each, for every front end: where JPEGs decode, how the pixels cross, which
// transfer mode runs. `pinfeed train` (app/plan/plan.cpp) and the Python loader (python/feed.cpp) both ask here.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>

#include "data/transform/transforms.h"
#include "pipeline/transfer/options.h"

namespace pinfeed::pipeline {

// data.decoder: where JPEGs decode. auto: nvJPEG wherever it can run.
enum class Decoder { kCpu, kNvjpeg, kAuto };

struct FeedAsk {
  Decoder decoder = Decoder::kAuto;
  c10::Device device{c10::kCPU};  // the resolved device
  bool uint8_transfer = false;    // the pixels were asked to cross as uint8 (pipeline.transfer_dtype = "uint8")
  bool pixel_ops = false;         // augmentations on the uint8 pixels, on the device (data.auto_augment)
  bool normalised = true;         // the consumer takes normalised pixels; false: raw uint8, which nvJPEG cannot give
  bool mode_chosen = false;       // a transfer mode or one of its flags was given: no preset is chosen here
};

// Why the pixels cross as uint8 although float32 was asked.
enum class Uint8Because { kAsked, kGpuDecoder, kPixelOps };

struct FeedAnswer {
  bool gpu_decode = false;
  data::PixelFormat format = data::PixelFormat::kFloat32Chw;  // kUint8Hwc: normalised on the device
  TransferDtype transfer_dtype = TransferDtype::kFloat32;
  std::optional<Uint8Because> uint8_because;  // set when transfer_dtype is uint8
  std::optional<Mode> preset;                 // the mode to apply: dual_stream on CUDA, else pageable; none if chosen
};

// Throws std::invalid_argument("data.decoder = \"nvjpeg\" needs ...") when nvJPEG was asked for and cannot run;
// the caller puts where it was asked in front.
FeedAnswer resolve_feed(const FeedAsk& ask);

}  // namespace pinfeed::pipeline

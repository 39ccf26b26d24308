// pinfeed predict: the top-k classes of each image, with their probabilities, from a pinfeed checkpoint (classes
// named as its training folder's) or a state dict (classes by index). Each image goes through the validation
// transform: the shorter side resized to data.image_size / data.val_resize_ratio, the centre crop, ImageNet's
// normalisation.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pinfeed::app {

struct PredictArgs {
  std::string checkpoint;           // --checkpoint
  std::vector<std::string> inputs;  // image files, and folders searched for images (recursively, sorted)
  int top_k = 5;
  bool json = false;   // one JSON object per image, {"path", "top": [{"index", "class", "probability"}]} or {"path", "error"}
  std::string config;  // -c: the transform (data.*) and train.device from this file; without it a checkpoint's
                       // recorded data.* keys, else the defaults (224 px)
  std::string device;  // --device: auto | cpu | cuda | cuda:N
};

void add_predict_options(CLI::App& command, PredictArgs& args);
// Exit code: 0, or 3 when any image could not be read (each named on one line; the others are still predicted).
// Throws ConfigError for a bad checkpoint, config or device.
int run_predict(const PredictArgs& args);

}  // namespace pinfeed::app

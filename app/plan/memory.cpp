#include "app/plan/memory.h"

#include <initializer_list>

namespace pinfeed::app {

// What autograd keeps for backward in model/resnet.cpp's network, in fp32 elements, for a 224 px image, summed
// from the architecture: a conv keeps its input, a BatchNorm its input, an in-place ReLU its output (which the
// next conv keeps too: counted once), the stem's max pool its int64 indices (two fp32 elements each); the residual
// add keeps nothing. ResNet-50: stem 2.16 M, layer1 8.03 M, layer2 5.82 M, layer3 4.11 M, layer4 1.15 M: 21.27 M
// per image, 424 per pixel (85 MB per 224 px image in fp32). BlurPool's output is a strided conv's new input (its
// own input is already kept): 2.11 M more per ResNet-50 image.
double saved_elements_per_pixel(const model::ArchSpec& arch, bool blurpool) {
  constexpr double s = 224;
  double e = 3 * s * s                        // conv1's input
             + 2 * 64 * (s / 2) * (s / 2)     // bn1's input, relu's output
             + 2 * 64 * (s / 4) * (s / 4);    // max pool's indices
  double side_in = s / 4, in_planes = 64;
  const int strides[4] = {1, 2, 2, 2};
  for (int stage = 0; stage < 4; ++stage) {
    const double planes = 64 << stage, side = side_in / strides[stage], out_px = side * side;
    const double out = planes * static_cast<double>(arch.expansion());
    for (int64_t b = 0; b < arch.layers[stage]; ++b) {
      const double in_px = b == 0 ? side_in * side_in : out_px;
      const bool downsample = b == 0 && (strides[stage] > 1 || in_planes != out);
      const bool blur = blurpool && b == 0 && strides[stage] > 1;
      if (arch.bottleneck) {  // the stride on conv2: bn1 at the input's side
        const double w = static_cast<double>(arch.width(static_cast<int64_t>(planes)));
        e += 2 * w * in_px     // bn1's input, relu's output (conv1's input is the block's input)
             + 2 * w * out_px  // bn2's input, relu's output
             + out * out_px    // bn3's input
             + out * out_px;   // the block's output after the add and relu
        if (blur) e += (w + in_planes) * side_in * side_in;  // the blurred inputs of conv2 and the downsample conv
      } else {  // BasicBlock: the stride on conv1
        e += 2 * planes * out_px  // bn1's input, relu's output
             + planes * out_px    // bn2's input
             + planes * out_px;   // the block's output after the add and relu
        if (blur) e += in_planes * side_in * side_in;  // the blurred input of conv1 and the downsample conv
      }
      if (downsample) e += out * out_px;  // the downsample BatchNorm's input
      in_planes = out;
    }
    side_in = side;
  }
  return e / (s * s);
}

// Backward adds the gradients of a layer's input and output while they are alive, convolution workspaces (and
// on the CPU oneDNN's reordered copies), and the allocator rounds up: 30% over the saved tensors.
constexpr double kActivationMargin = 1.3;

double activation_bytes(const model::ArchSpec& arch, int64_t batch, int64_t image_size, int element_bytes,
                        bool blurpool) {
  const double per_pixel = saved_elements_per_pixel(arch, blurpool);
  return static_cast<double>(batch) * static_cast<double>(image_size) * static_cast<double>(image_size) * per_pixel *
         kActivationMargin * element_bytes;
}

double model_state_bytes(const model::ArchSpec& arch, int64_t num_classes, int optimizer_copies, bool ema) {
  // An unknown class count (0: from the folders) is taken as 1000.
  const double parameters = static_cast<double>(model::parameter_count(arch, num_classes > 0 ? num_classes : 1000));
  return parameters * 4 /* bytes */ * (3 /* weights, gradients, a spare copy */ + optimizer_copies + (ema ? 1 : 0));
}

}  // namespace pinfeed::app

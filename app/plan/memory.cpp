#include "app/plan/memory.h"

#include <initializer_list>

namespace pinfeed::app {

// What autograd keeps for backward in model/resnet.cpp's ResNet-50, in fp32 elements, for a 224 px image, summed
// from the architecture: a conv keeps its input, a BatchNorm its input, an in-place ReLU its output (which the
// next conv keeps too: counted once), the stem's max pool its int64 indices (two fp32 elements each); the residual
// add keeps nothing. torchvision's bottleneck (v1.5: the stride on the 3x3 conv). Stem 2.16 M, layer1 8.03 M,
// layer2 5.82 M, layer3 4.11 M, layer4 1.15 M: 21.27 M per image, 424 per pixel (85 MB per 224 px image in fp32).
// BlurPool's output is a strided conv's new input (its own input is already kept): conv2's and the downsample's of
// each stage's first block past layer1, 2.11 M more per image.
double resnet50_saved_elements_per_pixel(bool blurpool) {
  constexpr double s = 224;
  double e = 3 * s * s                        // conv1's input
             + 2 * 64 * (s / 2) * (s / 2)     // bn1's input, relu's output
             + 2 * 64 * (s / 4) * (s / 4);    // max pool's indices
  double side_in = s / 4;
  struct Stage { int blocks, width, stride; };
  for (const Stage& stage : {Stage{3, 64, 1}, Stage{4, 128, 2}, Stage{6, 256, 2}, Stage{3, 512, 2}}) {
    const double side = side_in / stage.stride, w = stage.width, out = side * side;
    for (int b = 0; b < stage.blocks; ++b) {
      const double in = b == 0 ? side_in * side_in : out;
      e += 2 * w * in              // bn1's input, relu's output (conv1's input is the block's input)
           + 2 * w * out           // bn2's input, relu's output
           + 4 * w * out           // bn3's input
           + 4 * w * out           // the block's output after the add and relu
           + (b == 0 ? 4 * w * out : 0);  // the downsample BatchNorm's input
      if (blurpool && b == 0 && stage.stride > 1) {
        const double in_planes = 2 * w;  // the block's input: 4 x the last stage's width (2 x this one's)
        e += (w + in_planes) * side_in * side_in;  // the blurred inputs of conv2 and the downsample conv
      }
    }
    side_in = side;
  }
  return e / (s * s);
}

// Backward adds the gradients of a layer's input and output while they are alive, convolution workspaces (and
// on the CPU oneDNN's reordered copies), and the allocator rounds up: 30% over the saved tensors.
constexpr double kActivationMargin = 1.3;

double activation_bytes(int64_t batch, int64_t image_size, int element_bytes, bool blurpool) {
  static const double plain = resnet50_saved_elements_per_pixel(false);
  static const double blurred = resnet50_saved_elements_per_pixel(true);
  const double per_pixel = blurpool ? blurred : plain;
  return static_cast<double>(batch) * static_cast<double>(image_size) * static_cast<double>(image_size) * per_pixel *
         kActivationMargin * element_bytes;
}

double model_state_bytes(int64_t num_classes, int optimizer_copies, bool ema) {
  // torchvision's resnet50 has 25,557,032 parameters with 1000 classes, 2049 of them per class in fc. An unknown
  // class count (0: from the folders) is taken as 1000.
  const double classes = static_cast<double>(num_classes > 0 ? num_classes : 1000);
  const double parameters = 23'508'032 + 2049 * classes;
  return parameters * 4 /* bytes */ * (3 /* weights, gradients, a spare copy */ + optimizer_copies + (ema ? 1 : 0));
}

}  // namespace pinfeed::app

// The ResNet family as torchvision defines it (v1.5: a Bottleneck's stride on its 3x3 conv; BasicBlock for 18 and
// 34 layers; width and groups for the wide and ResNeXt ones), with torchvision's parameter names (conv1, bn1,
// layer1.0.conv1, layer1.0.downsample.0, fc) so that state dicts map one to one.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/batch_norm.h"
#include "model/blur_pool.h"

namespace pinfeed::model {

// model.arch: torchvision's names.
enum class Arch {
  kResNet18, kResNet34, kResNet50, kResNet101, kResNet152,
  kWideResNet50_2, kWideResNet101_2, kResNeXt50_32x4d, kResNeXt101_32x8d
};

struct ArchSpec {
  Arch arch;
  const char* name;          // torchvision.models' function
  bool bottleneck;           // else BasicBlock (two 3x3 convs)
  int64_t layers[4];         // blocks per stage
  int64_t groups = 1;        // of each Bottleneck's 3x3 conv (ResNeXt)
  int64_t width_per_group = 64;  // the Bottleneck's inner width is planes x width_per_group / 64 x groups
  int64_t expansion() const { return bottleneck ? 4 : 1; }
  // A Bottleneck's inner width in a stage of `planes` (64, 128, 256, 512).
  int64_t width(int64_t planes) const { return planes * width_per_group / 64 * groups; }
};
const std::vector<ArchSpec>& arch_specs();  // torchvision's order
const ArchSpec& spec_of(Arch arch);
const ArchSpec& spec_of(const std::string& name);  // model.arch's value; std::invalid_argument for another
// Trainable parameters of `arch` with `num_classes` outputs, from the architecture (count_parameters of the built
// model gives the same).
int64_t parameter_count(const ArchSpec& spec, int64_t num_classes);
// The architecture whose parameters these are (torchvision's names: blocks per stage, conv3's presence, conv2's
// groups and width), or nullopt when they are no ResNet of the family.
std::optional<Arch> arch_of_weights(const std::map<std::string, at::Tensor>& weights);

struct ResNetOptions {
  int64_t num_classes = 1000;
  // Zero-initialise the last BN of each residual branch so every block starts as the identity (Goyal et al.
  // 2017, "Accurate, Large Minibatch SGD"; torchvision's default is false).
  bool zero_init_residual = true;
  // In training mode, each BN with the ReLU and residual add after it runs as one cuDNN op (model/batch_norm.h):
  // CUDA, channels_last, bf16 or fp16 autocast. Evaluation and the parameter names are the same either way.
  bool fused_bn = false;
  // In training, the stem's max pool by pinfeed's kernels (model/max_pool.h): CUDA tensors. The same values and
  // gradients as ATen's, fewer bytes moved (model.max_pool).
  bool stem_max_pool = false;
  // In training, each block's input gradient summed inside its first convolution's data gradient
  // (model/conv_fork.h) instead of by a separate add: channels_last tensors (model.fold_grad_add).
  bool fold_grad_add = false;
  // With fused_bn, which BN + ReLU (+ add) run through the cuDNN frontend's graph API (model.bn_graph).
  GraphBatchNorm bn_graph = GraphBatchNorm::kNone;
  // FFCV's BlurPool (model/blur_pool.h) before each strided convolution of >= 16 input channels: layer2-4's
  // block-0 conv2 and downsample.0. In training and evaluation alike; no parameters, so the same state dict.
  bool blurpool = false;
  Arch arch = Arch::kResNet50;
};

class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  // width: the 3x3 conv's channels (planes for ResNet-50), groups: its groups (ResNeXt).
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride, bool fused_bn = false, bool fold_grad_add = false,
                 GraphBatchNorm bn_graph = GraphBatchNorm::kNone, bool blurpool = false, int64_t width = 0,
                 int64_t groups = 1);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};  // conv 1x1 + BN when shape changes, else empty

 private:
  bool fused_bn_, fold_grad_add_;
  GraphBatchNorm bn_graph_;
  // With blurpool and stride 2: the blurs of conv2's input (planes channels) and downsample.0's (in_planes).
  std::optional<BlurPool> blur_conv2_, blur_downsample_;
};
TORCH_MODULE(Bottleneck);

// ResNet-18's and -34's block: conv 3x3 (the stride) + BN + ReLU, conv 3x3 + BN, the add and ReLU. The fused BN
// and the graph BatchNorm apply; model.fold_grad_add and bn_graph = "conv"'s conv3 are the Bottleneck's routes (its
// 1x1 convs): this block takes the plain convolutions and "small"'s graphs.
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride, bool fused_bn = false,
                 GraphBatchNorm bn_graph = GraphBatchNorm::kNone, bool blurpool = false);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};

 private:
  bool fused_bn_;
  GraphBatchNorm bn_graph_;
  std::optional<BlurPool> blur_;  // with blurpool and stride 2: the block's input, before conv1 and the downsample
};
TORCH_MODULE(BasicBlock);

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  // (B, 3, H, W) float -> (B, num_classes) logits. Also (B, 4, H, W): RGB and a zero fourth channel, which
  // cuDNN's fp16 kernels for the 7x7 stem convolution take faster than 3 channels (docs/training-step.md); the
  // result is the 3-channel one.
  torch::Tensor forward(torch::Tensor x);
  Arch arch() const { return arch_; }

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  torch::nn::Sequential make_layer(const ArchSpec& spec, int64_t planes, int64_t blocks, int64_t stride);
  torch::Tensor stem_conv(const torch::Tensor& x);
  void init_weights(bool zero_init_residual);
  int64_t in_planes_ = 64;
  bool fused_bn_, stem_max_pool_, fold_grad_add_, blurpool_;
  GraphBatchNorm bn_graph_;
  Arch arch_;
};
TORCH_MODULE(ResNet);

ResNet resnet(const ResNetOptions& options = {});  // options.arch's network

// Number of scalar parameters (trainable weights; BN running statistics excluded).
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace pinfeed::model

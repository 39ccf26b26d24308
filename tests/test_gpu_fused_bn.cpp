// GPU tests of the fused BatchNorm (model/batch_norm.h; ctest label "gpu"), both routes: against ATen's BatchNorm,
// add and ReLU computed in float32 from the same (upcast) inputs; skipped without CUDA or without the fused op.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/rand.h>
#include <torch/cuda.h>
#include <torch/nn/functional/activation.h>

#include <string>
#include <vector>

#include "model/batch_norm.h"

namespace pinfeed::model {
namespace {

std::string skip_reason() {
  if (!torch::cuda::is_available()) return "no CUDA device";
  return fused_batch_norm_unavailable_reason();
}

double relative_error(const at::Tensor& out, const at::Tensor& ref) {
  return (out.to(at::kDouble) - ref.to(at::kDouble)).norm().item<double>() / ref.to(at::kDouble).norm().item<double>();
}

// Two BatchNorm2d of C channels with the same random weight, bias and running statistics, on cuda:0.
std::pair<torch::nn::BatchNorm2d, torch::nn::BatchNorm2d> twin_bns(int64_t c) {
  torch::nn::BatchNorm2d a(c), b(c);
  a->to(torch::kCUDA);
  b->to(torch::kCUDA);
  torch::NoGradGuard no_grad;
  a->weight.copy_(at::rand({c}) + 0.5);
  a->bias.copy_(at::randn({c}) * 0.1);
  a->running_mean.copy_(at::randn({c}));
  a->running_var.copy_(at::rand({c}) + 0.5);
  b->weight.copy_(a->weight);
  b->bias.copy_(a->bias);
  b->running_mean.copy_(a->running_mean);
  b->running_var.copy_(a->running_var);
  return {a, b};
}

struct Case {
  int64_t n, c, h, w;
  bool relu, residual;
};

std::string name(const Case& k, at::ScalarType dtype) {
  return std::string(c10::toString(dtype)) + " " + std::to_string(k.n) + "x" + std::to_string(k.c) + "x" +
         std::to_string(k.h) + "x" + std::to_string(k.w) + (k.residual ? " +add" : "") + (k.relu ? " +relu" : "");
}

// ResNet-50's shapes (at a small batch and resolution) and all three fused ops.
const std::vector<Case> kCases = {
    {16, 64, 32, 32, false, false}, {16, 64, 32, 32, true, false},  {16, 256, 16, 16, true, true},
    {8, 512, 8, 8, true, true},     {8, 2048, 4, 4, true, true},    {8, 1024, 8, 8, false, false},
    {4, 128, 28, 28, true, false},  {3, 8, 5, 7, true, true},
};

// Every case through `graph` (kNone: cuDNN's ...Ex calls; kAll: the graph API's route for BN + ReLU (+ add)).
void expect_matches_aten(GraphBatchNorm graph) {
  at::manual_seed(7);
  for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    // One rounding of a bf16 output is 2^-9 relative; fp16's 2^-12. The gradients go through a reduction of
    // rounded values and a rounded output: a few roundings.
    const double tol = dtype == at::kBFloat16 ? 1.5e-2 : 3e-3;
    for (const Case& k : kCases) {
      SCOPED_TRACE(name(k, dtype));
      auto [ref_bn, bn] = twin_bns(k.c);
      const auto cuda = at::TensorOptions().device(at::kCUDA);
      const at::Tensor x = (at::randn({k.n, k.c, k.h, k.w}, cuda) * 2 + 0.3).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
      const at::Tensor z = k.residual ? at::randn_like(x) : at::Tensor();
      const at::Tensor dy = at::randn_like(x);

      // Reference: float32 from the same rounded inputs.
      const at::Tensor xr = x.to(at::kFloat).detach().requires_grad_(true);
      const at::Tensor zr = k.residual ? z.to(at::kFloat).detach().requires_grad_(true) : at::Tensor();
      at::Tensor yr = ref_bn->forward(xr);
      if (k.residual) yr = yr + zr;
      if (k.relu) yr = torch::nn::functional::relu(yr);
      yr.backward(dy.to(at::kFloat));

      const at::Tensor xf = x.detach().requires_grad_(true);
      const at::Tensor zf = k.residual ? z.detach().requires_grad_(true) : at::Tensor();
      const at::Tensor y = fused_batch_norm(xf, zf, *bn, k.relu, graph);
      ASSERT_EQ(y.scalar_type(), dtype);
      ASSERT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
      y.backward(dy);

      EXPECT_LT(relative_error(y, yr), tol) << "output";
      EXPECT_LT(relative_error(xf.grad(), xr.grad()), tol) << "input gradient";
      if (k.residual) {
        EXPECT_LT(relative_error(zf.grad(), zr.grad()), tol) << "residual gradient";
      }
      EXPECT_LT(relative_error(bn->weight.grad(), ref_bn->weight.grad()), tol) << "weight gradient";
      EXPECT_LT(relative_error(bn->bias.grad(), ref_bn->bias.grad()), tol) << "bias gradient";
      // The statistics come from the rounded x in both: only the arithmetic differs.
      EXPECT_LT(relative_error(bn->running_mean, ref_bn->running_mean), 1e-4) << "running mean";
      EXPECT_LT(relative_error(bn->running_var, ref_bn->running_var), 1e-4) << "running variance (unbiased)";
      EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
    }
  }
}

TEST(GpuFusedBatchNorm, ForwardBackwardAndStatisticsMatchATenInFloat32) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  expect_matches_aten(GraphBatchNorm::kNone);
}

// The cuDNN frontend's graphs: the ReLU's bit mask, the running statistics updated in place, the shortcut's
// gradient as the masked dy.
TEST(GpuFusedBatchNorm, GraphApiRouteMatchesATenInFloat32) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  if (const std::string why = graph_batch_norm_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  expect_matches_aten(GraphBatchNorm::kAll);
}

// A block's conv3 + BN + add + ReLU with BN's statistics from the convolution (GraphBatchNorm::kConv), fp16,
// against ATen's convolution, BatchNorm, add and ReLU in float32 from the same rounded inputs and weight.
TEST(GpuFusedBatchNorm, ConvStatisticsRouteMatchesATenInFloat32) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  if (const std::string why = graph_batch_norm_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  at::globalContext().setAllowTF32CuDNN(false);  // the float32 reference convolution in full float32
  at::manual_seed(11);
  struct ConvCase {
    int64_t n, c, k, h, w;
  };
  // conv3 of stages 3 and 4, of stage 1 at a small size (C -> 4C channels), and one of 32 values per channel,
  // where an unbiased variance differs from a biased one by 3%.
  for (const ConvCase& k : {ConvCase{8, 256, 1024, 14, 14}, ConvCase{8, 512, 2048, 7, 7},
                            ConvCase{4, 64, 256, 16, 16}, ConvCase{2, 64, 256, 4, 4}}) {
    SCOPED_TRACE(std::to_string(k.n) + "x" + std::to_string(k.c) + "->" + std::to_string(k.k) + "x" +
                 std::to_string(k.h) + "x" + std::to_string(k.w));
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(k.c, k.k, 1).bias(false));
    conv->to(torch::kCUDA);
    auto [ref_bn, bn] = twin_bns(k.k);
    const at::Tensor old_mean = bn->running_mean.clone(), old_var = bn->running_var.clone();
    const auto cuda = at::TensorOptions().device(at::kCUDA);
    constexpr auto kNhwc = at::MemoryFormat::ChannelsLast;
    const at::Tensor x = at::randn({k.n, k.c, k.h, k.w}, cuda).relu().to(at::kHalf).contiguous(kNhwc);  // a ReLU's output
    const at::Tensor z = at::randn({k.n, k.k, k.h, k.w}, cuda).to(at::kHalf).contiguous(kNhwc);
    const at::Tensor dy = at::randn_like(z);

    const at::Tensor xf = x.detach().requires_grad_(true);
    const at::Tensor zf = z.detach().requires_grad_(true);
    std::string why;
    const at::Tensor y = conv_bn_add_relu(xf, *conv, *bn, zf, why);
    ASSERT_TRUE(y.defined()) << why;
    ASSERT_EQ(y.scalar_type(), at::kHalf);
    ASSERT_TRUE(y.is_contiguous(kNhwc));
    y.backward(dy);

    const at::Tensor wr = conv->weight.detach().to(at::kHalf).to(at::kFloat).requires_grad_(true);
    const at::Tensor xr = x.to(at::kFloat).detach().requires_grad_(true);
    const at::Tensor zr = z.to(at::kFloat).detach().requires_grad_(true);
    const at::Tensor pre = ref_bn->forward(at::conv2d(xr, wr)) + zr;
    const at::Tensor yr = torch::nn::functional::relu(pre);
    // The route rounds the convolution's output to fp16 before BN: about 5e-5 of the ReLUs fall the other way,
    // each passing or stopping a whole dy (about 1% on every gradient). The reference backward takes the route's
    // ReLU decisions; the shortcut's gradient then checks them (and the mask's layout) exactly.
    (pre * (y > 0).to(at::kFloat)).backward(dy.to(at::kFloat));
    EXPECT_TRUE(at::equal(zf.grad(), dy * (y > 0).to(dy.scalar_type()))) << "shortcut gradient = dy * (y > 0)";

    const double tol = 3e-3;  // fp16, as expect_matches_aten
    EXPECT_LT(relative_error(y, yr), tol) << "output";
    EXPECT_LT(relative_error(xf.grad(), xr.grad()), tol) << "input gradient";
    EXPECT_LT(relative_error(zf.grad(), zr.grad()), tol) << "residual gradient";
    EXPECT_LT(relative_error(conv->weight.grad(), wr.grad()), tol) << "convolution weight gradient";
    EXPECT_LT(relative_error(bn->weight.grad(), ref_bn->weight.grad()), tol) << "BN weight gradient";
    EXPECT_LT(relative_error(bn->bias.grad(), ref_bn->bias.grad()), tol) << "BN bias gradient";
    // The batch's share of the new running statistics (the old values would hide an error in the sum), from the
    // fp16 convolution's output against the float32 one's. A biased variance is 3% off in the 32-value case.
    const double m = *bn->options.momentum();
    EXPECT_LT(relative_error(bn->running_mean - (1 - m) * old_mean, ref_bn->running_mean - (1 - m) * old_mean), 1e-3)
        << "running mean";
    EXPECT_LT(relative_error(bn->running_var - (1 - m) * old_var, ref_bn->running_var - (1 - m) * old_var), 1e-3)
        << "running variance (unbiased)";
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  }
  // bf16: no plan in cuDNN; an undefined tensor and the reason, nothing updated.
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(64, 256, 1).bias(false));
  conv->to(torch::kCUDA);
  auto [unused, bn] = twin_bns(256);
  const at::Tensor x = at::randn({2, 64, 8, 8}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  std::string why;
  EXPECT_FALSE(conv_bn_add_relu(x, *conv, *bn, at::randn({2, 256, 8, 8}, x.options()), why).defined());
  EXPECT_NE(why.find("fp16 only"), std::string::npos) << why;
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
}

TEST(GpuFusedBatchNorm, RefusesWhatCuDnnDoesNotFuse) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  torch::nn::BatchNorm2d bn(8);
  bn->to(torch::kCUDA);
  const at::Tensor x = at::randn({2, 8, 4, 4}, at::TensorOptions().device(at::kCUDA).dtype(at::kHalf));
  EXPECT_THROW(fused_batch_norm(x, x, *bn, /*relu=*/false), c10::Error);          // add without ReLU
  EXPECT_THROW(fused_batch_norm(x.to(at::kFloat), {}, *bn, true), c10::Error);     // float32 input
  EXPECT_THROW(fused_batch_norm(x, x.to(at::kFloat), *bn, true), c10::Error);      // residual of another dtype
}

}  // namespace
}  // namespace pinfeed::model

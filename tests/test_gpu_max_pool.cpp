// GPU tests of the stem max pool's kernels (model/max_pool.h; ctest label "gpu"): the same output and gradient as
// ATen's max pool on the GPU, in float32, fp16 and bf16; skipped without CUDA.
#include <gtest/gtest.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <torch/cuda.h>
#include <torch/nn/functional/pooling.h>

#include <string>

#include "model/max_pool.h"

namespace pinfeed::model {
namespace {

TEST(GpuStemMaxPool, OutputAndGradientEqualATensInEveryDtype) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(8);
  namespace F = torch::nn::functional;
  for (const at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    // ResNet's stem at batch 16, odd sizes, and few distinct values (ties everywhere).
    for (const auto& [x0, ties] : {std::pair{at::randn({16, 64, 112, 112}), false},
                                   std::pair{at::randn({3, 8, 15, 17}), false},
                                   std::pair{at::randn({2, 5, 9, 11}), false},  // channels not a 16-byte vector
                                   std::pair{at::randint(0, 4, {4, 64, 20, 20}), true}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (ties ? " ties" : ""));
      const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
      const at::Tensor x = x0.to(opts).contiguous(at::MemoryFormat::ChannelsLast);
      const at::Tensor xa = x.detach().requires_grad_(true), xb = x.detach().requires_grad_(true);
      const at::Tensor ya = F::max_pool2d(xa, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
      const at::Tensor yb = stem_max_pool(xb);
      ASSERT_EQ(ya.sizes(), yb.sizes());
      EXPECT_TRUE(yb.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(ya.equal(yb)) << "outputs differ";
      const at::Tensor grad = at::randn(ya.sizes(), opts);
      ya.backward(grad);
      yb.backward(grad);
      // Both sum a pixel's (at most 4) window gradients in float32 and round once; only the order may differ.
      const double diff = (xa.grad().to(at::kDouble) - xb.grad().to(at::kDouble)).abs().max().item<double>();
      const double scale = xa.grad().to(at::kDouble).abs().max().item<double>();
      EXPECT_LE(diff, (dtype == at::kFloat ? 1e-6 : 1e-2) * scale) << "gradients differ";
    }
  }
}

}  // namespace
}  // namespace pinfeed::model

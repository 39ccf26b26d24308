// The stem max pool's per-element arithmetic (model/cuda/max_pool_math.h), which its CUDA kernels run, against
// ATen's max pool on the CPU: the same maxima, the same argmax (ties, NaN, windows of -inf), the same gradients.
// Runs without a GPU; tests/test_gpu_max_pool.cpp checks the kernels themselves.
#include <gtest/gtest.h>

#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool2d_with_indices_backward.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <cmath>
#include <limits>

#include "model/cuda/max_pool_math.h"

namespace pinfeed::model::pool {
namespace {

// x: (H, W) float, one image of one channel. Checks forward and backward against ATen.
void expect_matches_aten(const at::Tensor& x, const at::Tensor& grad_y) {
  const int64_t h = x.size(0), w = x.size(1), oh_n = out_size(h), ow_n = out_size(w);
  const auto [y_ref, idx_ref] = at::max_pool2d_with_indices(x.view({1, 1, h, w}), {3, 3}, {2, 2}, {1, 1});
  ASSERT_EQ(y_ref.size(2), oh_n);
  ASSERT_EQ(y_ref.size(3), ow_n);
  const float* in = x.data_ptr<float>();
  std::vector<uint8_t> offsets(oh_n * ow_n);
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    for (int64_t ow = 0; ow < ow_n; ++ow) {
      const auto read = [&](int kh, int kw) { return in[(oh * 2 - 1 + kh) * w + (ow * 2 - 1 + kw)]; };
      float max;
      window_max(read, h, w, oh, ow, &max, &offsets[oh * ow_n + ow]);
      const float want = y_ref[0][0][oh][ow].item<float>();
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(max)) << oh << "," << ow;
      } else {
        EXPECT_EQ(max, want) << oh << "," << ow;
      }
      const int kh = offsets[oh * ow_n + ow] / 3, kw = offsets[oh * ow_n + ow] % 3;
      EXPECT_EQ((oh * 2 - 1 + kh) * w + (ow * 2 - 1 + kw), idx_ref[0][0][oh][ow].item<int64_t>()) << oh << "," << ow;
    }
  }
  const at::Tensor gx_ref = at::max_pool2d_with_indices_backward(grad_y.view({1, 1, oh_n, ow_n}), x.view({1, 1, h, w}),
                                                                 {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, idx_ref);
  const float* gy = grad_y.data_ptr<float>();
  for (int64_t ih = 0; ih < h; ++ih) {
    for (int64_t iw = 0; iw < w; ++iw) {
      int64_t oh_first, ow_first;
      int oh_count, ow_count;
      windows_over(ih, oh_n, &oh_first, &oh_count);
      windows_over(iw, ow_n, &ow_first, &ow_count);
      ASSERT_TRUE(oh_count >= 1 && oh_count <= 2 && ow_count >= 1 && ow_count <= 2) << ih << "," << iw;
      const auto at = [&](int dh, int dw) { return (oh_first + dh) * ow_n + (ow_first + dw); };
      const auto grad = [&](int dh, int dw) { return gy[at(dh, dw)]; };
      const auto offset = [&](int dh, int dw) { return static_cast<int>(offsets[at(dh, dw)]); };
      EXPECT_NEAR(input_grad(grad, offset, oh_n, ow_n, ih, iw), gx_ref[0][0][ih][iw].item<float>(), 1e-5)
          << ih << "," << iw;
    }
  }
}

TEST(StemMaxPoolMath, MatchesATenOnRandomImagesOfOddAndEvenSizes) {
  at::manual_seed(3);
  for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 3}, {7, 7}, {8, 9}, {16, 15}, {112, 112}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
    expect_matches_aten(at::randn({h, w}), at::randn({out_size(h), out_size(w)}));
  }
}

// Ties everywhere (few distinct values): the first maximum in row-major order wins, as in ATen.
TEST(StemMaxPoolMath, TiesGoToTheFirstMaximumAsInATen) {
  at::manual_seed(4);
  expect_matches_aten(at::randint(0, 3, {13, 12}).to(at::kFloat), at::randn({7, 6}));
}

TEST(StemMaxPoolMath, NanWinsAndWindowsOfMinusInfinityKeepTheirFirstElement) {
  at::Tensor x = at::randn({9, 9});
  x[4][4] = std::nanf("");
  x[0][0] = std::numeric_limits<float>::quiet_NaN();
  x.narrow(0, 6, 3).fill_(-std::numeric_limits<float>::infinity());
  expect_matches_aten(x, at::randn({5, 5}));
}

}  // namespace
}  // namespace pinfeed::model::pool

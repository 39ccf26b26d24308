#include "model/conv_fork.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/csrc/autograd/custom_function.h>

namespace pinfeed::model {
namespace {

constexpr int64_t kOne[] = {1, 1}, kZero[] = {0, 0};

at::Tensor conv1x1(const at::Tensor& x, const at::Tensor& w) {
  return at::convolution(x, w, {}, kOne, kZero, kOne, false, kZero, 1);
}

// The (N*H*W, C) matrix of a channels_last (N, C, H, W) tensor, sharing its memory.
at::Tensor rows(const at::Tensor& t) { return t.permute({0, 2, 3, 1}).view({-1, t.size(1)}); }

// Whether the residual path's gradient can take the sum in place: laid out as rows, of the product's type, and
// held by no other tensor (the autograd engine's own test before it accumulates in place).
bool can_accumulate_into(const at::Tensor& dz, const at::Tensor& x, const at::Tensor& w) {
  return dz.sizes() == x.sizes() && dz.scalar_type() == w.scalar_type() &&
         dz.is_contiguous(c10::MemoryFormat::ChannelsLast) && !dz.requires_grad() && dz.has_storage() &&
         dz.storage().use_count() == 1 && dz.storage_offset() == 0;
}

class ConvForkFunction : public torch::autograd::Function<ConvForkFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& weight) {
    const c10::DeviceType device = x.device().type();
    const at::ScalarType type =
        at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : x.scalar_type();
    const at::Tensor xc = x.to(type), wc = weight.to(type);
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["x_type"] = x.scalar_type();
    ctx->saved_data["weight_type"] = weight.scalar_type();
    return {conv1x1(xc, wc), x};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor& dz = grads[1];
    const at::ScalarType x_type = ctx->saved_data["x_type"].toScalarType();
    const at::ScalarType weight_type = ctx->saved_data["weight_type"].toScalarType();
    if (!grads[0].defined()) return {dz.defined() ? dz.to(x_type) : dz, at::Tensor()};
    const at::Tensor dy = grads[0].to(w.scalar_type()).contiguous(x.suggest_memory_format());
    const bool fold = dz.defined() && can_accumulate_into(dz, x, w) && dy.is_contiguous(c10::MemoryFormat::ChannelsLast);
    // One call for the weight gradient, and for the data gradient where it is not folded into dz.
    auto [dx, dw, db] =
        at::convolution_backward(dy, x, w, std::nullopt, kOne, kZero, kOne, false, kZero, 1, {!fold, true, false});
    if (fold) {
      // dz += dy W: the (N*H*W, K) gradient rows times the (K, C) weight, added as the GEMM writes.
      rows(dz).addmm_(rows(dy), w.view({w.size(0), w.size(1)}));
      dx = dz;
    } else if (dz.defined()) {
      dx = dx + dz;
    }
    return {dx.to(x_type), dw.to(weight_type)};
  }
};

}  // namespace

ConvFork conv1x1_fork(const torch::Tensor& x, const torch::Tensor& weight) {
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && weight.size(2) == 1 && weight.size(3) == 1 &&
                  weight.size(1) == x.size(1),
              "conv1x1_fork: x (N, C, H, W) and weight (K, C, 1, 1) expected, got ", x.sizes(), " and ",
              weight.sizes());
  const auto out = ConvForkFunction::apply(x, weight);
  return {out[0], out[1]};
}

}  // namespace pinfeed::model

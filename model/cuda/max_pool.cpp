// stem_max_pool as a LibTorch autograd function around max_pool.cu's kernels, on the caller's stream.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/cuda/max_pool_kernels.h"
#include "model/cuda/max_pool_math.h"
#include "model/max_pool.h"

namespace pinfeed::model {
namespace {

pool::Dtype dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return pool::Dtype::kFloat;
    case at::kHalf: return pool::Dtype::kHalf;
    case at::kBFloat16: return pool::Dtype::kBFloat16;
    default: TORCH_CHECK(false, "stem_max_pool: float32, fp16 or bf16 input expected, got ", t.scalar_type());
  }
}

class StemMaxPoolFunction : public torch::autograd::Function<StemMaxPoolFunction> {
 public:
  // x: (N, C, H, W) channels_last.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const auto shape = std::vector<int64_t>{n, c, pool::out_size(h), pool::out_size(w)};
    at::Tensor y = at::empty(shape, x.options().memory_format(at::MemoryFormat::ChannelsLast));
    at::Tensor offsets = at::empty(shape, x.options().dtype(at::kByte).memory_format(at::MemoryFormat::ChannelsLast));
    pool::forward(dtype_of(x), x.const_data_ptr(), y.data_ptr(), offsets.data_ptr<uint8_t>(), n, h, w, c,
                  at::cuda::getCurrentCUDAStream(x.device().index()).stream());
    ctx->save_for_backward({offsets});
    ctx->saved_data["h"] = h;
    ctx->saved_data["w"] = w;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor offsets = ctx->get_saved_variables()[0];
    const at::Tensor grad_y = grad_outputs[0].contiguous(at::MemoryFormat::ChannelsLast);
    const int64_t n = grad_y.size(0), c = grad_y.size(1), h = ctx->saved_data["h"].toInt(),
                  w = ctx->saved_data["w"].toInt();
    at::Tensor grad_x = at::empty({n, c, h, w}, grad_y.options().memory_format(at::MemoryFormat::ChannelsLast));
    pool::backward(dtype_of(grad_y), grad_y.const_data_ptr(), offsets.const_data_ptr<uint8_t>(), grad_x.data_ptr(),
                   n, h, w, c, at::cuda::getCurrentCUDAStream(grad_y.device().index()).stream());
    return {grad_x};
  }
};

}  // namespace

std::string stem_max_pool_unavailable_reason() { return ""; }

torch::Tensor stem_max_pool(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, "stem_max_pool: x must be a 4-d CUDA tensor, got ", x.sizes(), " on ",
              x.device());
  dtype_of(x);
  const c10::cuda::CUDAGuard guard(x.device());
  return StemMaxPoolFunction::apply(x.contiguous(at::MemoryFormat::ChannelsLast));
}

}  // namespace pinfeed::model

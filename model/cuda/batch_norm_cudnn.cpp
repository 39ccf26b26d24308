// fused_batch_norm through cuDNN's NHWC BatchNorm with fused ops (cudnnBatchNormalizationForwardTrainingEx and
// cudnnBatchNormalizationBackwardEx), as a LibTorch autograd function, or, where asked, through the graph API's
// route (batch_norm_graph.cpp). cuDNN is the one LibTorch loaded: ATen's handle pool, set to the caller's stream.
#include "model/batch_norm.h"
#include "model/cuda/batch_norm_graph.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>

namespace pinfeed::model {
namespace {

#define PINFEED_CUDNN_CHECK(call)                                                                 \
  do {                                                                                            \
    const cudnnStatus_t status_ = (call);                                                         \
    TORCH_CHECK(status_ == CUDNN_STATUS_SUCCESS, #call " failed: ", cudnnGetErrorString(status_)); \
  } while (0)

// The spatial mode with cuDNN's NHWC kernels for half-precision tensors (one "semiPersist" kernel per call in a
// trace). The plain spatial mode was not measured.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

class TensorDesc {
 public:
  TensorDesc() { PINFEED_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_{};
};

class ActivationDesc {
 public:
  ActivationDesc() {
    PINFEED_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_));
    PINFEED_CUDNN_CHECK(cudnnSetActivationDescriptor(d_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  }
  ~ActivationDesc() { cudnnDestroyActivationDescriptor(d_); }
  ActivationDesc(const ActivationDesc&) = delete;
  ActivationDesc& operator=(const ActivationDesc&) = delete;
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_{};
};

cudnnDataType_t data_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return CUDNN_DATA_HALF;
    case at::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: TORCH_CHECK(false, "fused_batch_norm: input must be bf16 or fp16, got ", t);
  }
}

// One call's descriptors: x (also y, z and their gradients: one shape, one dtype), the per-channel float32
// tensors (scale, bias, statistics) cuDNN derives from it, and the ReLU.
struct Descriptors {
  Descriptors(const at::Tensor& x, bool relu, bool residual)
      : ops(residual ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
                     : relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN),
        has_activation(relu) {
    // cuDNN's 4-d descriptor takes the logical NCHW sizes and the layout: channels_last memory is NHWC.
    PINFEED_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc.get(), CUDNN_TENSOR_NHWC, data_type(x.scalar_type()),
                                                   static_cast<int>(x.size(0)), static_cast<int>(x.size(1)),
                                                   static_cast<int>(x.size(2)), static_cast<int>(x.size(3))));
    PINFEED_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param_desc.get(), x_desc.get(), kMode));
  }
  cudnnActivationDescriptor_t activation() const { return has_activation ? act.get() : nullptr; }

  TensorDesc x_desc, param_desc;
  ActivationDesc act;
  cudnnBatchNormOps_t ops;
  bool has_activation;
};

cudnnHandle_t handle_on(cudaStream_t stream) {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  PINFEED_CUDNN_CHECK(cudnnSetStream(handle, stream));
  return handle;
}

at::Tensor bytes(size_t n, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(n)}, like.options().dtype(at::kByte).memory_format(c10::nullopt));
}

const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }

class FusedBatchNormFunction : public torch::autograd::Function<FusedBatchNormFunction> {
 public:
  // x, residual (if any): (N, C, H, W) channels_last; weight, bias, running_mean, running_var: (C,)
  // float32. Returns y like x.
  // residual is optional rather than an undefined tensor: autograd records every tensor input's device.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const std::optional<at::Tensor>& residual_or_none, const at::Tensor& weight,
                            const at::Tensor& bias, at::Tensor running_mean, at::Tensor running_var, double momentum,
                            double eps, bool relu) {
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
    const cudnnHandle_t handle = handle_on(stream);
    const at::Tensor residual = residual_or_none.value_or(at::Tensor());
    const bool has_residual = residual.defined();
    const Descriptors d(x, relu, has_residual);
    const cudnnTensorDescriptor_t z_desc = has_residual ? d.x_desc.get() : nullptr;
    size_t workspace_size = 0, reserve_size = 0;
    PINFEED_CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        handle, kMode, d.ops, d.x_desc.get(), z_desc, d.x_desc.get(), d.param_desc.get(), d.activation(),
        &workspace_size));
    PINFEED_CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, d.ops, d.activation(),
                                                                             d.x_desc.get(), &reserve_size));
    at::Tensor y = at::empty_like(x);  // keeps channels_last
    at::Tensor save_mean = at::empty_like(running_mean), save_inv_std = at::empty_like(running_var);
    at::Tensor workspace = bytes(workspace_size, x), reserve = bytes(reserve_size, x);
    const float one = 1, zero = 0;
    PINFEED_CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
        handle, kMode, d.ops, &one, &zero, d.x_desc.get(), x.const_data_ptr(), z_desc, ptr_or_null(residual),
        d.x_desc.get(), y.data_ptr(), d.param_desc.get(), weight.const_data_ptr(), bias.const_data_ptr(), momentum,
        running_mean.data_ptr(), running_var.data_ptr(), eps, save_mean.data_ptr(), save_inv_std.data_ptr(),
        d.activation(), workspace.data_ptr(), workspace_size, reserve.data_ptr(), reserve_size));
    // y is needed only to find where the ReLU let the gradient through.
    ctx->save_for_backward({x, relu ? y : at::Tensor(), weight, bias, save_mean, save_inv_std, reserve});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = has_residual;
    return y;
  }

  // Gradients of x, residual, weight and bias; none for the statistics and the three constants.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &bias = saved[3], &save_mean = saved[4],
                     &save_inv_std = saved[5], &reserve = saved[6];
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool relu = ctx->saved_data["relu"].toBool(), has_residual = ctx->saved_data["residual"].toBool();
    const at::Tensor dy = grad_outputs[0].contiguous(c10::MemoryFormat::ChannelsLast);
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
    const cudnnHandle_t handle = handle_on(stream);
    const Descriptors d(x, relu, has_residual);
    const cudnnTensorDescriptor_t dz_desc = has_residual ? d.x_desc.get() : nullptr;
    size_t workspace_size = 0;
    PINFEED_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        handle, kMode, d.ops, d.x_desc.get(), d.x_desc.get(), d.x_desc.get(), dz_desc, d.x_desc.get(),
        d.param_desc.get(), d.activation(), &workspace_size));
    at::Tensor dx = at::empty_like(x), dz = has_residual ? at::empty_like(x) : at::Tensor();
    at::Tensor dweight = at::empty_like(weight), dbias = at::empty_like(bias);
    at::Tensor workspace = bytes(workspace_size, x);
    const float one = 1, zero = 0;
    PINFEED_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
        handle, kMode, d.ops, &one, &zero, &one, &zero, d.x_desc.get(), x.const_data_ptr(),
        relu ? d.x_desc.get() : nullptr, ptr_or_null(y), d.x_desc.get(), dy.const_data_ptr(), dz_desc,
        has_residual ? dz.data_ptr() : nullptr, d.x_desc.get(), dx.data_ptr(), d.param_desc.get(),
        weight.const_data_ptr(), bias.const_data_ptr(), dweight.data_ptr(), dbias.data_ptr(), eps,
        save_mean.const_data_ptr(), save_inv_std.const_data_ptr(), d.activation(), workspace.data_ptr(),
        workspace_size, const_cast<void*>(reserve.const_data_ptr()), reserve.numel()));
    return {dx, dz, dweight, dbias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::string fused_batch_norm_unavailable_reason() { return ""; }

std::string graph_batch_norm_unavailable_reason() { return detail::graph_batch_norm_unavailable_reason(); }

torch::Tensor fused_batch_norm(const torch::Tensor& x, const torch::Tensor& residual, torch::nn::BatchNorm2dImpl& bn,
                               bool relu, GraphBatchNorm graph) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, "fused_batch_norm: x must be a 4-d CUDA tensor, got ", x.sizes(), " on ",
              x.device());
  TORCH_CHECK(!residual.defined() || relu, "fused_batch_norm: a residual add needs the ReLU after it");
  TORCH_CHECK(!residual.defined() || (residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type()),
              "fused_batch_norm: residual ", residual.sizes(), " ", residual.scalar_type(), " does not match x ",
              x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(bn.weight.scalar_type() == at::kFloat && bn.running_mean.scalar_type() == at::kFloat,
              "fused_batch_norm: BatchNorm parameters and statistics must be float32");
  const auto momentum = bn.options.momentum();
  TORCH_CHECK(momentum.has_value(), "fused_batch_norm: a cumulative moving average (momentum None) is not supported");
  const c10::cuda::CUDAGuard guard(x.device());
  constexpr auto kNhwc = c10::MemoryFormat::ChannelsLast;
  const at::Tensor z = residual.defined() ? residual.contiguous(kNhwc) : residual;
  const std::optional<at::Tensor> z_or_none = z.defined() ? std::optional<at::Tensor>(z) : std::nullopt;
  const at::Tensor x_nhwc = x.contiguous(kNhwc);
  at::Tensor y;
  if (takes_graph(graph, x.size(1), x.size(2), x.size(3), relu)) {
    std::string why;
    y = detail::graph_batch_norm(x_nhwc, z, bn.weight, bn.bias, bn.running_mean, bn.running_var, *momentum,
                                 bn.options.eps(), why);
    TORCH_CHECK(y.defined() || graph != GraphBatchNorm::kAll, "fused_batch_norm: the graph API cannot run BN of ",
                x.sizes(), " ", x.scalar_type(), ": ", why);
    if (!y.defined()) {
      TORCH_WARN_ONCE("fused_batch_norm: the graph API cannot run BN of ", x.sizes(), " ", x.scalar_type(),
                      " (and maybe others): cuDNN's ...Ex calls run them instead. ", why);
    }
  }
  if (!y.defined()) {
    y = FusedBatchNormFunction::apply(x_nhwc, z_or_none, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                      *momentum, bn.options.eps(), relu);
  }
  {
    at::NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1);
  }
  return y;
}

torch::Tensor conv_bn_add_relu(const torch::Tensor& x, torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn,
                               const torch::Tensor& residual, std::string& why) {
  const auto& o = conv.options;
  const bool pointwise = (*o.kernel_size())[0] == 1 && (*o.kernel_size())[1] == 1 && (*o.stride())[0] == 1 &&
                         (*o.stride())[1] == 1 && o.groups() == 1 && !o.bias();
  TORCH_CHECK(pointwise, "conv_bn_add_relu: a 1x1 stride-1 convolution without bias expected");
  TORCH_CHECK(x.is_cuda() && x.dim() == 4 && residual.dim() == 4, "conv_bn_add_relu: 4-d CUDA tensors expected");
  TORCH_CHECK(residual.size(0) == x.size(0) && residual.size(1) == conv.weight.size(0) &&
                  residual.size(2) == x.size(2) && residual.size(3) == x.size(3) &&
                  residual.scalar_type() == x.scalar_type(),
              "conv_bn_add_relu: residual ", residual.sizes(), " ", residual.scalar_type(),
              " does not match the convolution's output");
  const auto momentum = bn.options.momentum();
  TORCH_CHECK(momentum.has_value(), "conv_bn_add_relu: a cumulative moving average (momentum None) is not supported");
  const c10::cuda::CUDAGuard guard(x.device());
  constexpr auto kNhwc = c10::MemoryFormat::ChannelsLast;
  // The weight in the input's dtype, as autocast casts it for a convolution (through its cache where autocast is
  // on: the cache lives until the autocast scope ends); the cast is differentiable, so the gradient reaches the
  // float32 weight.
  const at::Tensor w = (at::autocast::is_autocast_enabled(at::kCUDA)
                            ? at::autocast::cached_cast(x.scalar_type(), conv.weight, c10::DeviceType::CUDA)
                            : conv.weight.to(x.scalar_type()))
                           .contiguous(kNhwc);
  at::Tensor y = detail::graph_conv_bn_add_relu(x.contiguous(kNhwc), w, residual.contiguous(kNhwc), bn.weight, bn.bias,
                                                bn.running_mean, bn.running_var, *momentum, bn.options.eps(), why);
  if (y.defined()) {
    at::NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1);
  }
  return y;
}

}  // namespace pinfeed::model

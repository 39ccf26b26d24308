// Does NVIDIA's MLPerf form of ResNet-50's convolution + BatchNorm fusion pay on this GPU? Times it through the
// cuDNN frontend graph API against the kernels pinfeed's fp16 step runs, layer by layer, for ResNet-50's stride-1
// convolutions at batch N, fp16 NHWC (docs/training-step.md#the-cudnn-frontend-fusions). Not part of pinfeed.
//
// Forward, per convolution of a bottleneck block:
//   today  the convolution, then pinfeed's BatchNorm (cuDNN's NHWC BN with fused ops, model/cuda/batch_norm_cudnn.cpp):
//          BN+ReLU, or BN+add+ReLU after conv3
//   fused  the convolution with the previous BN's scale-bias-ReLU in its prologue (conv1 has none: its input is the
//          block's output) and this BN's statistics from its epilogue, then BN finalize; after conv3 a
//          scale-bias-add-ReLU pass
// Backward, per unit "BN+ReLU of a C-channel tensor, then a convolution C->K" (conv2 and conv3; conv1's input is a
// block output and its backward is the same both ways):
//   today  the data gradient, the weight gradient on the stored ReLU output, pinfeed's BN+ReLU backward
//   fused  data gradient + dReLU + the BN weight gradients in one graph, the dBN apply pass, the weight gradient
//          with the scale-bias-ReLU recomputed in its prologue
// Each graph's candidate plans (cuDNN's heuristics A, then fallback; at most --plans) are timed and the fastest
// kept, as autotuning at start-up would; each time is the median of 11 runs after 2, one call between two events
// on an otherwise idle GPU (so the host's launch of the call is in it). Speed only: the values are not checked.
// The frontend's own BatchNorm graphs are timed too, against pinfeed's.
//
// usage: bench_conv_bn_fusion [--batch N] [--plans P] [--json FILE]. Exits 77 without a CUDA device.
#include <cstring>  // before the frontend's headers, which use std::strlen without it

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;
using Pack = std::unordered_map<Tensor, void*>;
using Pointwise = fe::graph::Pointwise_attributes;
using fe::PointwiseMode_t;

void check_cuda(cudaError_t e, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench_conv_bn_fusion: CUDA %s (line %d)\n", cudaGetErrorString(e), line);
  std::exit(1);
}
void check_cudnn(cudnnStatus_t e, int line) {
  if (e == CUDNN_STATUS_SUCCESS) return;
  std::fprintf(stderr, "bench_conv_bn_fusion: cuDNN %s (line %d)\n", cudnnGetErrorString(e), line);
  std::exit(1);
}
#define CUDA_OK(x) check_cuda((x), __LINE__)
#define CUDNN_OK(x) check_cudnn((x), __LINE__)

cudaStream_t stream;
cudnnHandle_t handle;
int max_plans = 8;

__global__ void fill_half(__half* p, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const unsigned h = static_cast<unsigned>(i * 2654435761u) >> 8;
    p[i] = __float2half(((h % 2001) / 1000.f - 1.f) * scale);
  }
}
__global__ void fill_float(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

// Device memory: fp16 values in [-scale, scale] (scale 0: zeros), or float32 `value`s.
struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    CUDA_OK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
    CUDA_OK(cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 256), stream));
  }
  static Buffer half(size_t n, float scale) {
    Buffer b(n * 2);
    if (scale != 0) fill_half<<<1024, 256, 0, stream>>>(static_cast<__half*>(b.p), n, scale);
    return b;
  }
  static Buffer floats(size_t n, float value) {
    Buffer b(n * 4);
    fill_float<<<8, 256, 0, stream>>>(static_cast<float*>(b.p), n, value);
    return b;
  }
  Buffer(Buffer&& o) noexcept : p(o.p) { o.p = nullptr; }
  Buffer(const Buffer&) = delete;
  ~Buffer() { cudaFree(p); }
};

// A BOOLEAN tensor of `elements`: NVIDIA's batchnorm-backward sample packs it a bit per element, its layernorm one
// allocates a byte per element; a byte each keeps every reading within the buffer.
size_t mask_bytes(size_t elements) { return elements; }

// Median of 11 runs of f after 2, in microseconds.
double time_us(const std::function<bool()>& f) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  std::vector<float> t;
  bool ok = f() && f();
  for (int i = 0; i < 11 && ok; ++i) {
    CUDA_OK(cudaEventRecord(a, stream));
    ok = f();
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (!ok) return -1;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A graph with fp16 (or bf16) inputs and outputs, float32 compute and virtual tensors.
std::shared_ptr<fe::graph::Graph> new_graph(fe::DataType_t io = fe::DataType_t::HALF,
                                            fe::DataType_t intermediate = fe::DataType_t::FLOAT) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io).set_intermediate_data_type(intermediate).set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}
// An (n, c, h, w) tensor laid out NHWC.
Tensor nhwc(fe::graph::Graph& g, const char* name, int64_t n, int64_t c, int64_t h, int64_t w,
            std::optional<fe::DataType_t> type = std::nullopt) {
  auto a = fe::graph::Tensor_attributes().set_name(name).set_dim({n, c, h, w}).set_stride({c * h * w, 1, c * w, c});
  if (type) a.set_data_type(*type);
  return g.tensor(a);
}
// A per-channel (1, c, 1, 1) tensor, float32 unless told.
Tensor channels(fe::graph::Graph& g, const char* name, int64_t c, fe::DataType_t type = fe::DataType_t::FLOAT) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(type));
}
Tensor pointwise(fe::graph::Graph& g, Tensor a, Tensor b, PointwiseMode_t mode) {
  return g.pointwise(a, b, Pointwise().set_mode(mode));
}
Tensor relu(fe::graph::Graph& g, Tensor a) { return g.pointwise(a, Pointwise().set_mode(PointwiseMode_t::RELU_FWD)); }
void float_outputs(std::initializer_list<Tensor> ts) {
  for (const Tensor& t : ts) t->set_output(true).set_data_type(fe::DataType_t::FLOAT);
}

// The graph's candidate plans: cuDNN's heuristics A, then its fallback list.
fe::error_t prepare(fe::graph::Graph& g) {
  if (auto s = g.validate(); s.is_bad()) return s;
  if (auto s = g.build_operation_graph(handle); s.is_bad()) return s;
  if (auto s = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); s.is_bad()) return s;
  return g.check_support(handle);
}

// Builds the graph's candidate plans and times each with `pack`: the fastest plan's time in microseconds, or -1
// where cuDNN has no plan for it (`why` says why).
double time_graph(fe::graph::Graph& g, const Pack& pack, std::string* why) {
  auto s = prepare(g);
  if (s.is_bad()) {
    *why = s.get_message();
    return -1;
  }
  std::unordered_map<int64_t, void*> uids;
  for (const auto& [t, ptr] : pack) uids.emplace(t->get_uid(), ptr);
  double best = -1;
  const int64_t plans = std::min<int64_t>(g.get_execution_plan_count(), max_plans);
  for (int64_t i = 0; i < plans; ++i) {
    int64_t workspace = 0;
    if (g.build_plan_at_index(handle, i).is_bad() || g.get_workspace_size_plan_at_index(i, workspace).is_bad()) continue;
    Buffer w(workspace);
    const double t = time_us([&] { return g.execute_plan_at_index(handle, uids, w.p, i).is_good(); });
    if (t >= 0 && (best < 0 || t < best)) best = t;
  }
  if (best < 0) *why = "no plan of " + std::to_string(plans) + " built and ran";
  return best;
}

// pinfeed's BatchNorm (model/cuda/batch_norm_cudnn.cpp: the same calls, mode and ops) on an (n, c, hw, hw) fp16
// NHWC tensor: forward (BN+ReLU, or BN+add+ReLU with `add`) and backward, in microseconds.
void pinfeed_batch_norm(int64_t n, int64_t c, int64_t hw, bool add, double* forward, double* backward) {
  cudnnTensorDescriptor_t xd, pd;
  cudnnActivationDescriptor_t act;
  CUDNN_OK(cudnnCreateTensorDescriptor(&xd));
  CUDNN_OK(cudnnCreateTensorDescriptor(&pd));
  CUDNN_OK(cudnnCreateActivationDescriptor(&act));
  CUDNN_OK(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  CUDNN_OK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, int(n), int(c), int(hw), int(hw)));
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  const cudnnBatchNormOps_t ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  CUDNN_OK(cudnnDeriveBNTensorDescriptor(pd, xd, mode));
  const cudnnTensorDescriptor_t zd = add ? xd : nullptr;
  const size_t elements = n * c * hw * hw;
  Buffer x = Buffer::half(elements, 1), z = Buffer::half(elements, 1), y = Buffer::half(elements, 0),
         dy = Buffer::half(elements, 0.01f), dx = Buffer::half(elements, 0), dz = Buffer::half(elements, 0);
  Buffer w = Buffer::floats(c, 1), b = Buffer::floats(c, 0), rm = Buffer::floats(c, 0), rv = Buffer::floats(c, 1),
         mean = Buffer::floats(c, 0), inv = Buffer::floats(c, 1), dw = Buffer::floats(c, 0), db = Buffer::floats(c, 0);
  size_t fws = 0, rs = 0, bws = 0;
  CUDNN_OK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, ops, xd, zd, xd, pd, act, &fws));
  CUDNN_OK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, act, xd, &rs));
  CUDNN_OK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, ops, xd, xd, xd, zd, xd, pd, act, &bws));
  Buffer fw(fws), reserve(rs), bw(bws);
  const float one = 1, zero = 0;
  *forward = time_us([&] {
    return cudnnBatchNormalizationForwardTrainingEx(handle, mode, ops, &one, &zero, xd, x.p, zd, add ? z.p : nullptr, xd,
                                                    y.p, pd, w.p, b.p, 0.1, rm.p, rv.p, 1e-5, mean.p, inv.p, act, fw.p,
                                                    fws, reserve.p, rs) == CUDNN_STATUS_SUCCESS;
  });
  *backward = time_us([&] {
    return cudnnBatchNormalizationBackwardEx(handle, mode, ops, &one, &zero, &one, &zero, xd, x.p, xd, y.p, xd, dy.p, zd,
                                             add ? dz.p : nullptr, xd, dx.p, pd, w.p, b.p, dw.p, db.p, 1e-5, mean.p,
                                             inv.p, act, bw.p, bws, reserve.p, rs) == CUDNN_STATUS_SUCCESS;
  });
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(pd);
  cudnnDestroyActivationDescriptor(act);
}

// One of ResNet-50's stride-1 convolutions: C -> K channels, r x r kernel, hw x hw, `count` of them per step.
struct Layer {
  const char* name;
  const char* role;  // conv1, conv2 or conv3 of its block
  int64_t c, k, hw, r;
  int count;
  bool first() const { return std::strcmp(role, "conv1") == 0; }  // its input is a block's output
  bool last() const { return std::strcmp(role, "conv3") == 0; }   // BN + add + ReLU after it
};

// Microseconds per call; -1 where cuDNN had no plan.
struct Times {
  double conv = -1, conv_stats = -1, sbr_conv_stats = -1, finalize = -1, sbar = -1;
  // This layer's BN (+add) + ReLU, forward and backward (with the add's gradient after conv3): pinfeed's, the
  // frontend's.
  double bn_forward = -1, bn_forward_frontend = -1, bn_own_backward = -1, bn_own_backward_frontend = -1;
  double dgrad = -1, wgrad = -1, bn_backward = -1, bn_backward_frontend = -1;  // the unit's (BN of the C input)
  double dgrad_drelu_dbn_weight = -1, dbn_apply = -1, sbr_wgrad = -1;
  double forward_today() const { return conv + bn_forward; }
  double forward_fused(const Layer& l) const {
    return (l.first() ? conv_stats : sbr_conv_stats) + finalize + (l.last() ? sbar : 0);
  }
  double backward_today() const { return dgrad + wgrad + bn_backward; }
  double backward_fused() const { return dgrad_drelu_dbn_weight + dbn_apply + sbr_wgrad; }
  // Whether every graph the totals of layer l use had a plan.
  bool complete(const Layer& l) const {
    const bool forward = conv >= 0 && bn_forward >= 0 && finalize >= 0 &&
                         (l.first() ? conv_stats : sbr_conv_stats) >= 0 && (!l.last() || sbar >= 0);
    const bool backward = l.first() || (dgrad >= 0 && wgrad >= 0 && bn_backward >= 0 &&
                                        dgrad_drelu_dbn_weight >= 0 && dbn_apply >= 0 && sbr_wgrad >= 0);
    const bool batch_norm = bn_forward_frontend >= 0 && bn_own_backward >= 0 && bn_own_backward_frontend >= 0;
    return forward && backward && batch_norm;
  }
};

void time_forward(int64_t n, const Layer& l, Times* t) {
  const int64_t c = l.c, k = l.k, hw = l.hw, r = l.r, pad = r / 2;
  const bool conv3 = l.last();
  Buffer x = Buffer::half(n * c * hw * hw, 1), w = Buffer::half(k * c * r * r, 0.05f), y = Buffer::half(n * k * hw * hw, 0),
         out = Buffer::half(n * k * hw * hw, 0), residual = Buffer::half(n * k * hw * hw, 1);
  Buffer in_scale = Buffer::half(c, 1), in_bias = Buffer::half(c, 0.1f);  // the previous BN's, as finalize gives
  Buffer scale = Buffer::floats(k, 1), bias = Buffer::floats(k, 0), running_mean = Buffer::floats(k, 0),
         running_var = Buffer::floats(k, 1), sum = Buffer::floats(k, 0), squares = Buffer::floats(k, 0),
         s1 = Buffer::floats(k, 0), s2 = Buffer::floats(k, 0), s3 = Buffer::floats(k, 0), s4 = Buffer::floats(k, 0),
         s5 = Buffer::floats(k, 0), s6 = Buffer::floats(k, 0);
  const auto conv = fe::graph::Conv_fprop_attributes().set_padding({pad, pad}).set_stride({1, 1}).set_dilation({1, 1});
  std::string why;
  auto report = [&](const char* what) {
    if (!why.empty()) std::printf("  %s %s: %s\n", l.name, what, why.c_str());
    why.clear();
  };
  {
    auto g = new_graph();
    auto X = nhwc(*g, "x", n, c, hw, hw), W = nhwc(*g, "w", k, c, r, r);
    auto Y = g->conv_fprop(X, W, conv);
    Y->set_output(true);
    t->conv = time_graph(*g, {{X, x.p}, {W, w.p}, {Y, y.p}}, &why);
    report("conv");
  }
  {  // the statistics from the convolution's epilogue
    auto g = new_graph();
    auto X = nhwc(*g, "x", n, c, hw, hw), W = nhwc(*g, "w", k, c, r, r);
    auto Y = g->conv_fprop(X, W, conv);
    Y->set_output(true);
    auto [S, Q] = g->genstats(Y, fe::graph::Genstats_attributes());
    float_outputs({S, Q});
    t->conv_stats = time_graph(*g, {{X, x.p}, {W, w.p}, {Y, y.p}, {S, sum.p}, {Q, squares.p}}, &why);
    report("conv+genstats");
  }
  {  // and the previous BN's scale-bias-ReLU in its prologue
    auto g = new_graph();
    auto X = nhwc(*g, "x", n, c, hw, hw), W = nhwc(*g, "w", k, c, r, r);
    auto A = channels(*g, "in_scale", c, fe::DataType_t::HALF), B = channels(*g, "in_bias", c, fe::DataType_t::HALF);
    auto Y = g->conv_fprop(relu(*g, pointwise(*g, pointwise(*g, X, A, PointwiseMode_t::MUL), B, PointwiseMode_t::ADD)), W, conv);
    Y->set_output(true);
    auto [S, Q] = g->genstats(Y, fe::graph::Genstats_attributes());
    float_outputs({S, Q});
    t->sbr_conv_stats = time_graph(
        *g, {{X, x.p}, {W, w.p}, {A, in_scale.p}, {B, in_bias.p}, {Y, y.p}, {S, sum.p}, {Q, squares.p}}, &why);
    report("scale-bias-ReLU+conv+genstats");
  }
  {  // the statistics into this BN's scale and bias for the next convolution, and the running statistics
    auto g = new_graph();
    auto S = channels(*g, "sum", k), Q = channels(*g, "squares", k), G = channels(*g, "gamma", k),
         B = channels(*g, "beta", k), M = channels(*g, "running_mean", k), V = channels(*g, "running_var", k);
    auto eps = g->tensor(1e-5f), momentum = g->tensor(0.1f), count = g->tensor(int64_t(n * hw * hw));
    auto attr = fe::graph::BN_finalize_attributes().set_previous_running_stats(M, V, momentum);
    auto [es, eb, mean, inv, new_mean, new_var] = g->bn_finalize(S, Q, G, B, eps, count, attr);
    float_outputs({es, eb, mean, inv, new_mean, new_var});
    t->finalize = time_graph(*g, {{S, sum.p}, {Q, squares.p}, {G, scale.p}, {B, bias.p}, {M, running_mean.p},
                                  {V, running_var.p}, {es, s1.p}, {eb, s2.p}, {mean, s3.p}, {inv, s4.p},
                                  {new_mean, s5.p}, {new_var, s6.p}},
                             &why);
    report("bn_finalize");
  }
  if (conv3) {  // after conv3: scale-bias (finalize's), the block's shortcut added, ReLU
    auto g = new_graph();
    auto Y = nhwc(*g, "y", n, k, hw, hw), Z = nhwc(*g, "shortcut", n, k, hw, hw);
    auto A = channels(*g, "scale", k), B = channels(*g, "bias", k);
    auto O = relu(*g, pointwise(*g, pointwise(*g, pointwise(*g, Y, A, PointwiseMode_t::MUL), B, PointwiseMode_t::ADD), Z,
                                PointwiseMode_t::ADD));
    O->set_output(true);
    t->sbar = time_graph(*g, {{Y, y.p}, {Z, residual.p}, {A, s1.p}, {B, s2.p}, {O, out.p}}, &why);
    report("scale-bias-add-ReLU");
  }
  {  // the frontend's own BN (+add) + ReLU, for comparison with pinfeed's
    auto g = new_graph();
    auto Y = nhwc(*g, "y", n, k, hw, hw), Z = nhwc(*g, "shortcut", n, k, hw, hw);
    auto G = channels(*g, "gamma", k), B = channels(*g, "beta", k), M = channels(*g, "running_mean", k),
         V = channels(*g, "running_var", k);
    auto eps = g->tensor(1e-5f), momentum = g->tensor(0.1f);
    auto attr = fe::graph::Batchnorm_attributes().set_epsilon(eps).set_previous_running_stats(M, V, momentum);
    auto [O, mean, inv, new_mean, new_var] = g->batchnorm(Y, G, B, attr);
    auto R = relu(*g, conv3 ? pointwise(*g, O, Z, PointwiseMode_t::ADD) : O);
    R->set_output(true);
    float_outputs({mean, inv, new_mean, new_var});
    Pack p{{Y, y.p}, {G, scale.p}, {B, bias.p}, {M, running_mean.p}, {V, running_var.p}, {R, out.p},
           {mean, s3.p}, {inv, s4.p}, {new_mean, s5.p}, {new_var, s6.p}};
    if (conv3) p[Z] = residual.p;
    t->bn_forward_frontend = time_graph(*g, p, &why);
    report("frontend batchnorm");
  }
  {  // and its backward: the ReLU's gradient from a bit mask, after conv3 also given out as the shortcut's gradient
    auto g = new_graph();
    auto DY = nhwc(*g, "dy", n, k, hw, hw), Y = nhwc(*g, "y", n, k, hw, hw);
    auto MK = nhwc(*g, "mask", n, k, hw, hw, fe::DataType_t::BOOLEAN);
    auto G = channels(*g, "gamma", k), M = channels(*g, "mean", k), V = channels(*g, "inv_var", k);
    auto D = pointwise(*g, DY, MK, PointwiseMode_t::MUL);
    D->set_output(conv3).set_data_type(fe::DataType_t::HALF);
    auto [DX, dscale, dbias] = g->batchnorm_backward(
        D, Y, G, fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(M, V));
    DX->set_output(true);
    float_outputs({dscale, dbias});
    Buffer dy = Buffer::half(n * k * hw * hw, 0.01f), mask(mask_bytes(n * k * hw * hw));
    Pack p{{DY, dy.p}, {Y, y.p}, {MK, mask.p}, {G, scale.p}, {M, s3.p}, {V, running_var.p}, {DX, out.p},
           {dscale, s5.p}, {dbias, s6.p}};
    if (conv3) p[D] = residual.p;
    t->bn_own_backward_frontend = time_graph(*g, p, &why);
    report("frontend batchnorm_backward");
  }
  pinfeed_batch_norm(n, k, hw, conv3, &t->bn_forward, &t->bn_own_backward);
  CUDA_OK(cudaStreamSynchronize(stream));
}

void time_backward(int64_t n, const Layer& l, Times* t) {
  const int64_t c = l.c, k = l.k, hw = l.hw, r = l.r, pad = r / 2;
  Buffer x = Buffer::half(n * c * hw * hw, 1), relu_out = Buffer::half(n * c * hw * hw, 1),
         dy = Buffer::half(n * k * hw * hw, 0.01f), d1 = Buffer::half(n * c * hw * hw, 0.01f),
         d2 = Buffer::half(n * c * hw * hw, 0), w = Buffer::half(k * c * r * r, 0.05f), dw = Buffer(k * c * r * r * 4),
         mask(mask_bytes(n * c * hw * hw)), in_scale = Buffer::half(c, 1), in_bias = Buffer::half(c, 0.1f);
  Buffer mean = Buffer::floats(c, 0), inv = Buffer::floats(c, 1), gamma = Buffer::floats(c, 1),
         beta = Buffer::floats(c, 0), o1 = Buffer::floats(c, 0), o2 = Buffer::floats(c, 0), o3 = Buffer::floats(c, 0),
         o4 = Buffer::floats(c, 0), o5 = Buffer::floats(c, 0);
  std::string why;
  auto report = [&](const char* what) {
    if (!why.empty()) std::printf("  %s %s: %s\n", l.name, what, why.c_str());
    why.clear();
  };
  const auto dgrad = fe::graph::Conv_dgrad_attributes().set_padding({pad, pad}).set_stride({1, 1}).set_dilation({1, 1});
  const auto wgrad = fe::graph::Conv_wgrad_attributes().set_padding({pad, pad}).set_stride({1, 1}).set_dilation({1, 1});
  {
    auto g = new_graph();
    auto DY = nhwc(*g, "dy", n, k, hw, hw), W = nhwc(*g, "w", k, c, r, r);
    auto DX = g->conv_dgrad(DY, W, dgrad);
    DX->set_dim({n, c, hw, hw}).set_output(true);
    t->dgrad = time_graph(*g, {{DY, dy.p}, {W, w.p}, {DX, d1.p}}, &why);
    report("dgrad");
  }
  {
    auto g = new_graph();
    auto DY = nhwc(*g, "dy", n, k, hw, hw), X = nhwc(*g, "relu_out", n, c, hw, hw);
    auto DW = g->conv_wgrad(DY, X, wgrad);
    DW->set_dim({k, c, r, r}).set_output(true);
    t->wgrad = time_graph(*g, {{DY, dy.p}, {X, relu_out.p}, {DW, dw.p}}, &why);
    report("wgrad");
  }
  {  // the data gradient, the ReLU's gradient (the BN's output recomputed from x) and the BN weight gradients
    auto g = new_graph();
    auto DY = nhwc(*g, "dy", n, k, hw, hw), W = nhwc(*g, "w", k, c, r, r), X = nhwc(*g, "x", n, c, hw, hw);
    auto DG = g->conv_dgrad(DY, W, dgrad);
    DG->set_dim({n, c, hw, hw});
    auto M = channels(*g, "mean", c), V = channels(*g, "inv_var", c), G = channels(*g, "gamma", c),
         B = channels(*g, "beta", c);
    auto bn = pointwise(*g, pointwise(*g, pointwise(*g, pointwise(*g, X, M, PointwiseMode_t::SUB), V, PointwiseMode_t::MUL),
                                      G, PointwiseMode_t::MUL),
                        B, PointwiseMode_t::ADD);
    auto D = pointwise(*g, DG, bn, PointwiseMode_t::RELU_BWD);
    D->set_output(true);
    auto [dscale, dbias, eq_dy, eq_x, eq_bias] = g->dbn_weight(D, X, M, V, G, fe::graph::DBN_weight_attributes());
    float_outputs({dscale, dbias, eq_dy, eq_x, eq_bias});
    t->dgrad_drelu_dbn_weight = time_graph(*g, {{DY, dy.p}, {W, w.p}, {X, x.p}, {M, mean.p}, {V, inv.p}, {G, gamma.p},
                                                {B, beta.p}, {D, d1.p}, {dscale, o1.p}, {dbias, o2.p}, {eq_dy, o3.p},
                                                {eq_x, o4.p}, {eq_bias, o5.p}},
                                           &why);
    report("dgrad+dReLU+dBN weight");
  }
  {  // dBN apply: dx = eq_dy * d + eq_x * x + eq_bias
    auto g = new_graph();
    auto D = nhwc(*g, "d", n, c, hw, hw), X = nhwc(*g, "x", n, c, hw, hw);
    auto A = channels(*g, "eq_dy", c), B = channels(*g, "eq_x", c), C = channels(*g, "eq_bias", c);
    auto DX = pointwise(*g, pointwise(*g, pointwise(*g, D, A, PointwiseMode_t::MUL), pointwise(*g, X, B, PointwiseMode_t::MUL),
                                      PointwiseMode_t::ADD),
                        C, PointwiseMode_t::ADD);
    DX->set_output(true);
    t->dbn_apply = time_graph(*g, {{D, d1.p}, {X, x.p}, {A, o3.p}, {B, o4.p}, {C, o5.p}, {DX, d2.p}}, &why);
    report("dBN apply");
  }
  {  // the weight gradient with the BN's scale-bias-ReLU recomputed in its prologue
    auto g = new_graph(fe::DataType_t::HALF, fe::DataType_t::HALF);
    auto X = nhwc(*g, "x", n, c, hw, hw), DY = nhwc(*g, "dy", n, k, hw, hw);
    auto A = channels(*g, "in_scale", c, fe::DataType_t::HALF), B = channels(*g, "in_bias", c, fe::DataType_t::HALF);
    auto DW = g->conv_wgrad(DY, relu(*g, pointwise(*g, pointwise(*g, X, A, PointwiseMode_t::MUL), B, PointwiseMode_t::ADD)), wgrad);
    DW->set_dim({k, c, r, r}).set_output(true);
    t->sbr_wgrad = time_graph(*g, {{X, x.p}, {A, in_scale.p}, {B, in_bias.p}, {DY, dy.p}, {DW, dw.p}}, &why);
    report("scale-bias-ReLU+wgrad");
  }
  {  // the frontend's own BN + ReLU backward (the ReLU's gradient from a bit mask), for comparison with pinfeed's
    auto g = new_graph();
    auto DR = nhwc(*g, "d_relu_out", n, c, hw, hw), X = nhwc(*g, "x", n, c, hw, hw);
    auto MK = nhwc(*g, "mask", n, c, hw, hw, fe::DataType_t::BOOLEAN);
    auto G = channels(*g, "gamma", c), M = channels(*g, "mean", c), V = channels(*g, "inv_var", c);
    auto D = pointwise(*g, DR, MK, PointwiseMode_t::MUL);
    D->set_data_type(fe::DataType_t::HALF);
    auto [DX, dscale, dbias] = g->batchnorm_backward(
        D, X, G, fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(M, V));
    DX->set_output(true);
    float_outputs({dscale, dbias});
    t->bn_backward_frontend = time_graph(*g, {{DR, d1.p}, {MK, mask.p}, {X, x.p}, {G, gamma.p}, {M, mean.p}, {V, inv.p},
                                              {DX, d2.p}, {dscale, o1.p}, {dbias, o2.p}},
                                         &why);
    report("frontend batchnorm_backward");
  }
  double unused = 0;
  pinfeed_batch_norm(n, c, hw, false, &unused, &t->bn_backward);
  CUDA_OK(cudaStreamSynchronize(stream));
}

// Whether cuDNN has a conv + genstats plan in bf16 (the fusions' samples and docs say fp16).
bool bf16_conv_stats(int64_t n) {
  auto g = new_graph(fe::DataType_t::BFLOAT16);
  auto X = nhwc(*g, "x", n, 64, 56, 56), W = nhwc(*g, "w", 64, 64, 3, 3);
  auto Y = g->conv_fprop(X, W, fe::graph::Conv_fprop_attributes().set_padding({1, 1}).set_stride({1, 1}).set_dilation({1, 1}));
  Y->set_output(true);
  auto [S, Q] = g->genstats(Y, fe::graph::Genstats_attributes());
  float_outputs({S, Q});
  return prepare(*g).is_good();
}

std::string cell(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string json_number(double v) {
  if (v < 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 256;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) n = std::atoll(argv[++i]);
    else if (a == "--plans" && i + 1 < argc) max_plans = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_conv_bn_fusion [--batch N] [--plans P] [--json FILE]\n");
      return 2;
    }
  }
  if (n < 1 || max_plans < 1) {
    std::fprintf(stderr, "bench_conv_bn_fusion: --batch and --plans must be at least 1\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_conv_bn_fusion: no CUDA device\n");
    return 77;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDNN_OK(cudnnCreate(&handle));
  CUDNN_OK(cudnnSetStream(handle, stream));
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  // Per bottleneck block: conv1 (1x1, 4C -> C), conv2 (3x3, C -> C), conv3 (1x1, C -> 4C), each counted in every
  // block where it has that shape at stride 1: all conv3s; the conv2s but stages 2-4's first (stride 2); the conv1s
  // but each stage's first (other input channels). Left out: those 7, the stem and the 4 downsample convolutions.
  const std::vector<Layer> layers = {
      {"s1.conv1", "conv1", 256, 64, 56, 1, 2},   {"s1.conv2", "conv2", 64, 64, 56, 3, 3},
      {"s1.conv3", "conv3", 64, 256, 56, 1, 3},   {"s2.conv1", "conv1", 512, 128, 28, 1, 3},
      {"s2.conv2", "conv2", 128, 128, 28, 3, 3},  {"s2.conv3", "conv3", 128, 512, 28, 1, 4},
      {"s3.conv1", "conv1", 1024, 256, 14, 1, 5}, {"s3.conv2", "conv2", 256, 256, 14, 3, 5},
      {"s3.conv3", "conv3", 256, 1024, 14, 1, 6}, {"s4.conv1", "conv1", 2048, 512, 7, 1, 2},
      {"s4.conv2", "conv2", 512, 512, 7, 3, 2},   {"s4.conv3", "conv3", 512, 2048, 7, 1, 3},
  };
  std::printf("%s, cuDNN %zu, cuDNN frontend %d, batch %ld, fp16 NHWC, best of up to %d plans per graph\n", prop.name,
              cudnnGetVersion(), CUDNN_FRONTEND_VERSION, static_cast<long>(n), max_plans);
  std::printf("%-9s | %7s %7s %7s %7s %7s %7s | %7s %7s | %7s %7s %7s %7s %7s %7s | %7s %7s (us per call)\n", "layer",
              "conv", "conv+st", "sbr+c+s", "final", "sbar", "bn", "today", "fused", "dgrad", "wgrad", "bn_bwd",
              "dg+dr+w", "dbn_app", "sbr+wgr", "today", "fused");
  std::vector<Times> times(layers.size());
  double fwd_today = 0, fwd_fused = 0, bwd_today = 0, bwd_fused = 0, bn_pinfeed = 0, bn_frontend = 0;
  bool complete = true;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    Times& t = times[i];
    time_forward(n, l, &t);
    const bool unit = !l.first();  // a BN+ReLU -> conv unit
    if (unit) time_backward(n, l, &t);
    // "-": not part of this layer's forms (scale-bias-add-ReLU follows conv3 only); -1: cuDNN had no plan.
    std::printf("%-9s | %7.1f %7.1f %7.1f %7.1f %7s %7.1f | %7.1f %7.1f", l.name, t.conv, t.conv_stats,
                t.sbr_conv_stats, t.finalize, l.last() ? cell(t.sbar).c_str() : "-", t.bn_forward, t.forward_today(),
                t.forward_fused(l));
    if (unit) {
      std::printf(" | %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f | %7.1f %7.1f", t.dgrad, t.wgrad, t.bn_backward,
                  t.dgrad_drelu_dbn_weight, t.dbn_apply, t.sbr_wgrad, t.backward_today(), t.backward_fused());
    }
    std::printf("  x%d\n", l.count);
    complete = complete && t.complete(l);
    fwd_today += l.count * t.forward_today();
    fwd_fused += l.count * t.forward_fused(l);
    bn_pinfeed += l.count * (t.bn_forward + t.bn_own_backward);
    bn_frontend += l.count * (t.bn_forward_frontend + t.bn_own_backward_frontend);
    if (unit) {
      bwd_today += l.count * t.backward_today();
      bwd_fused += l.count * t.backward_fused();
    }
  }
  const bool bf16 = bf16_conv_stats(n);
  if (!complete) std::printf("Some graphs had no plan (above): the totals below are not valid.\n");
  std::printf("Per step, these layers (us): forward today %.0f, fused %.0f; backward today %.0f, fused %.0f; "
              "the fused form saves %.0f\n", fwd_today, fwd_fused, bwd_today, bwd_fused,
              (fwd_today + bwd_today) - (fwd_fused + bwd_fused));
  std::printf("These layers' BatchNorms alone, forward + backward (us per step): pinfeed's %.0f, the frontend's %.0f\n",
              bn_pinfeed, bn_frontend);
  std::printf("bf16 conv + genstats: %s\n", bf16 ? "a plan exists" : "no plan (the fusions are fp16 only here)");
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) {
      std::fprintf(stderr, "bench_conv_bn_fusion: cannot write %s\n", json);
      return 1;
    }
    std::fprintf(f, "{\n  \"device\": \"%s\", \"cudnn\": %zu, \"cudnn_frontend\": %d, \"batch\": %ld, \"precision\": \"fp16\",\n"
                 "  \"max_plans\": %d, \"complete\": %s, \"bf16_conv_genstats\": %s,\n",
                 prop.name, cudnnGetVersion(), CUDNN_FRONTEND_VERSION, static_cast<long>(n), max_plans,
                 complete ? "true" : "false", bf16 ? "true" : "false");
    std::fprintf(f, "  \"per_step_us\": {\"forward_today\": %.1f, \"forward_fused\": %.1f, \"backward_today\": %.1f, "
                 "\"backward_fused\": %.1f, \"batch_norm_pinfeed\": %.1f, \"batch_norm_frontend\": %.1f},\n  \"layers\": [\n",
                 fwd_today, fwd_fused, bwd_today, bwd_fused, bn_pinfeed, bn_frontend);
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      const Times& t = times[i];
      const std::pair<const char*, double> fields[] = {
          {"conv", t.conv}, {"conv_genstats", t.conv_stats}, {"sbr_conv_genstats", t.sbr_conv_stats},
          {"bn_finalize", t.finalize}, {"scale_bias_add_relu", t.sbar}, {"bn_forward_pinfeed", t.bn_forward},
          {"bn_forward_frontend", t.bn_forward_frontend}, {"bn_backward_own_pinfeed", t.bn_own_backward},
          {"bn_backward_own_frontend", t.bn_own_backward_frontend}, {"dgrad", t.dgrad}, {"wgrad", t.wgrad},
          {"bn_backward_unit_pinfeed", t.bn_backward}, {"bn_backward_unit_frontend", t.bn_backward_frontend},
          {"dgrad_drelu_dbn_weight", t.dgrad_drelu_dbn_weight}, {"dbn_apply", t.dbn_apply},
          {"sbr_wgrad", t.sbr_wgrad}};
      std::fprintf(f, "    {\"layer\": \"%s\", \"c\": %ld, \"k\": %ld, \"hw\": %ld, \"kernel\": %ld, \"count\": %d", l.name,
                   static_cast<long>(l.c), static_cast<long>(l.k), static_cast<long>(l.hw), static_cast<long>(l.r), l.count);
      for (const auto& [name, v] : fields) std::fprintf(f, ", \"%s\": %s", name, json_number(v).c_str());
      std::fprintf(f, "}%s\n", i + 1 < layers.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    if (std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_conv_bn_fusion: cannot write %s\n", json);
      return 1;
    }
  }
  return 0;
}

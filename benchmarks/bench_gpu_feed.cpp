// Host cost of each CUDA call that hands a batch over in dual_stream (Feeder::next()), one kind at a time on an
// otherwise idle GPU: what the training thread spends per batch. The earlier way and the current way of each
// step side by side, for the uint8 transfer of 224 px batches. Exits 77 (ctest: skipped) without a CUDA device.
#include <benchmark/benchmark.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <cstdio>

#include "gpu/gpu.h"
#include "pipeline/transfer/host_ring.h"

namespace {
using namespace pinfeed;

const c10::Device kCuda(c10::kCUDA, 0);

void drain() { gpu::synchronize(gpu::current_stream(kCuda)); }

at::Tensor on_gpu(std::vector<int64_t> shape, c10::ScalarType dtype) {
  return at::empty(shape, at::TensorOptions().dtype(dtype).device(kCuda));
}

void BM_Event_CreateRecordDestroy(benchmark::State& state) {  // earlier: a new event per use
  const c10::Stream stream = gpu::current_stream(kCuda);
  for (auto _ : state) {
    gpu::Event event;
    event.record(stream);
  }
  drain();
}
BENCHMARK(BM_Event_CreateRecordDestroy);

void BM_Event_PooledRecord(benchmark::State& state) {  // now: events come back to a pool
  const c10::Stream stream = gpu::current_stream(kCuda);
  gpu::EventPool pool;
  for (auto _ : state) pool.get()->record(stream);
  drain();
}
BENCHMARK(BM_Event_PooledRecord);

// Copies are timed one at a time: the GPU is drained (untimed) after each, so no copy waits for another.
void BM_Copy_ImagesThenLabels(benchmark::State& state) {  // earlier: two tensors, two copies
  pipeline::HostRing ring(1, state.range(0), {224, 224, 3}, c10::kByte, /*pinned=*/true);
  for (auto _ : state) {
    at::Tensor images = ring.images(0).to(kCuda, /*non_blocking=*/true);
    at::Tensor labels = ring.labels(0).to(kCuda, /*non_blocking=*/true);
    state.PauseTiming();
    drain();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Copy_ImagesThenLabels)->Arg(64)->Arg(256);

void BM_Copy_WholeSlot(benchmark::State& state) {  // now: one buffer, one copy, views on the device
  pipeline::HostRing ring(1, state.range(0), {224, 224, 3}, c10::kByte, /*pinned=*/true);
  const at::Tensor host = ring.slot_bytes(0);
  for (auto _ : state) {
    at::Tensor slot = on_gpu({host.numel()}, c10::kByte);
    slot.copy_(host, /*non_blocking=*/true);
    at::Tensor images = ring.layout().images(slot), labels = ring.layout().labels(slot);
    state.PauseTiming();
    drain();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Copy_WholeSlot)->Arg(64)->Arg(256);

void BM_Normalise_CastSubMul(benchmark::State& state) {  // earlier: cast, subtract, multiply
  const at::Tensor u8 = on_gpu({state.range(0), 224, 224, 3}, c10::kByte);
  const at::Tensor mean = at::tensor({123.7f, 116.3f, 103.5f}).view({1, 3, 1, 1}).to(kCuda);
  const at::Tensor inv_std = at::tensor({0.017f, 0.018f, 0.017f}).view({1, 3, 1, 1}).to(kCuda);
  for (auto _ : state) {
    at::Tensor x = u8.permute({0, 3, 1, 2}).to(c10::kFloat).sub_(mean).mul_(inv_std);
    state.PauseTiming();
    drain();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Normalise_CastSubMul)->Arg(64)->Arg(256);

void BM_Normalise_MulAdd(benchmark::State& state) {  // now: multiply (casting inside), add
  const at::Tensor u8 = on_gpu({state.range(0), 224, 224, 3}, c10::kByte);
  const at::Tensor scale = at::tensor({0.017f, 0.018f, 0.017f}).view({1, 3, 1, 1}).to(kCuda);
  const at::Tensor shift = at::tensor({-2.1f, -2.0f, -1.8f}).view({1, 3, 1, 1}).to(kCuda);
  for (auto _ : state) {
    at::Tensor x = u8.permute({0, 3, 1, 2}).mul(scale).add_(shift);
    state.PauseTiming();
    drain();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Normalise_MulAdd)->Arg(64)->Arg(256);

void BM_HandOver_WaitEventAndRecordStream(benchmark::State& state) {  // both ways: compute waits on the copy
  const c10::Stream copy = gpu::new_stream(kCuda), compute = gpu::current_stream(kCuda);
  const at::Tensor images = on_gpu({64, 3, 224, 224}, c10::kFloat), labels = on_gpu({64}, c10::kLong);
  gpu::EventPool pool;
  for (auto _ : state) {
    auto ready = pool.get();
    ready->record(copy);
    ready->block(compute);
    images.record_stream(compute);
    labels.record_stream(compute);
  }
  drain();
}
BENCHMARK(BM_HandOver_WaitEventAndRecordStream);

}  // namespace

int main(int argc, char** argv) {
  if (!gpu::available()) {
    std::puts("bench_gpu_feed: no CUDA device, skipped");
    return 77;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// JpegDecoder on nvJPEG. Baseline JPEGs go to the hardware engines through the batched API (one call per chunk
// of a batch, each image decoding only its crop's pixels: ROI decode); the rest the hardware does not take
// (progressive, other subsamplings) to nvJPEG's default single-image decoder (hybrid: Huffman on this thread, the
// rest on the GPU); a file nvJPEG refuses after all is decoded on the CPU with the same crop. Then one kernel
// resizes and normalises every crop into the model's input (crop_resize.cu), the CPU-decoded samples too.
#include "pipeline/decode/jpeg_decoder.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "common/log.h"
#include "pipeline/decode/cuda/crop_resize.h"

namespace pinfeed::pipeline {
namespace {

const char* status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
  }
  return "unknown status";
}

void check(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS) throw std::runtime_error(std::string("nvJPEG ") + what + ": " + status_name(s));
}

size_t rgb_bytes(const data::EncodedImage& e) { return static_cast<size_t>(e.width) * e.height * 3; }

// The part of an image nvJPEG writes, in full-size pixels.
struct Region {
  int x = 0, y = 0, w = 0, h = 0;
  size_t bytes() const { return (static_cast<size_t>(w) * h * 3 + 255) / 256 * 256; }
};

// The crop in the image shrunk by its reduction, as the CPU path's region decode takes it (jpeg_region.cpp).
data::CropBox shrunk_crop(const data::EncodedImage& e) {
  const int r = e.reduction;
  return data::scaled_crop(e.box, (e.width + r - 1) / r, (e.height + r - 1) / r, r);
}

// The full-size pixels under that crop: what the hardware engines need to write (ROI decode). Its corner is a
// multiple of the reduction, so its blocks are the whole image's (crop_resize.cu averages them).
Region crop_region(const data::EncodedImage& e) {
  const int r = e.reduction;
  const data::CropBox c = shrunk_crop(e);
  Region g{c.x * r, c.y * r, 0, 0};
  g.w = std::min(c.w * r, e.width - g.x);
  g.h = std::min(c.h * r, e.height - g.y);
  return g;
}

}  // namespace

struct JpegDecoder::Impl {
  c10::Device device;
  data::TransformOptions transform;
  int64_t budget_bytes;
  nvjpegHandle_t hardware = nullptr;  // null where the GPU has no JPEG engines
  // A decode state's buffers are read by its work on the stream after the call returns: no new images for it
  // before `state_done`. One state, not two in turn: each brings streams of nvJPEG's own, and two in flight
  // decoded slower beside a busy step (docs/gpu-decode.md#how-the-gpu-decoder-works).
  nvjpegJpegState_t hardware_state = nullptr;
  std::vector<nvjpegDecodeParams_t> params;  // one per image of a hardware batch (output format and ROI)
  cudaEvent_t state_done = nullptr;
  bool state_used = false;
  // nvJPEG's hardware pool, sized by nvjpegDecodeBatchedPreAllocate to the batches seen and grown within the
  // decode budget: unsized, nvJPEG reallocates between batches and its synchronous free stalls the copier and the
  // training thread until the step's graph ends (docs/gpu-decode.md#how-the-gpu-decoder-works).
  int pool_images = 0, pool_width = 0, pool_height = 0;
  int seen_width = 0, seen_height = 0;  // the largest hardware-decoded image so far
  static constexpr int kLoggedFailures = 5;
  int64_t failed_batches = 0;  // hardware batches nvJPEG refused (their images went one at a time)
  nvjpegHandle_t single = nullptr;  // default backend, one image at a time
  nvjpegJpegState_t single_state = nullptr;
  // nvJPEG writes each image's pixels into memory this decoder keeps for its lifetime: handed back to the caching
  // allocator after each chunk, that memory was written after its release in stream order, over another tensor
  // allocated there next (docs/gpu-decode.md#how-the-gpu-decoder-works). Each chunk places its images from the start.
  at::Tensor output_pool;
  size_t output_used = 0;
  // The stream of the last call and an event after its work: a call on another stream waits for it (on the
  // device) before reusing the output pool, which stream order alone protects on one stream.
  cudaStream_t last_stream = nullptr;
  cudaEvent_t last_done = nullptr;
  data::DecodeScratch scratch;  // CPU fallback
  std::vector<uint8_t> cpu_pixels;
  mutable std::mutex stats_mutex;
  JpegDecodeStats stats;

  Impl(c10::Device d, const data::TransformOptions& t, int64_t budget) : device(d), transform(t), budget_bytes(budget) {
    try {
      if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &hardware) ==
          NVJPEG_STATUS_SUCCESS) {
        check(nvjpegJpegStateCreate(hardware, &hardware_state), "state (hardware)");
        C10_CUDA_CHECK(cudaEventCreateWithFlags(&state_done, cudaEventDisableTiming));
      } else {
        hardware = nullptr;
        log::warn("nvJPEG: this GPU has no hardware JPEG decoder; every JPEG goes to the hybrid decoder");
      }
      check(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &single), "create");
      check(nvjpegJpegStateCreate(single, &single_state), "state");
    } catch (...) {
      release();  // a constructor that throws gets no destructor
      throw;
    }
    stats.hardware_backend = hardware != nullptr;
  }

  ~Impl() { release(); }

  void release() {
    if (single_state) nvjpegJpegStateDestroy(single_state);
    if (single) nvjpegDestroy(single);
    if (state_done) {
      cudaEventSynchronize(state_done);
      cudaEventDestroy(state_done);
    }
    if (last_done) {
      cudaEventSynchronize(last_done);
      cudaEventDestroy(last_done);
    }
    for (nvjpegDecodeParams_t p : params) nvjpegDecodeParamsDestroy(p);
    params.clear();
    if (hardware_state) nvjpegJpegStateDestroy(hardware_state);
    if (hardware) nvjpegDestroy(hardware);
    single_state = nullptr;
    single = nullptr;
    hardware = nullptr;
    state_done = nullptr;
    last_done = nullptr;
    hardware_state = nullptr;
  }

  // Sizes nvJPEG's pool (see pool_images) for the most images a call has had and the largest width and height seen,
  // while the state is idle. The pool is counted as 4 bytes a pixel (nvJPEG's RGBA intermediate) against the decode
  // budget; past it the width and height are scaled down, and larger images get memory from nvJPEG itself, as they
  // did without a pool. It changes only when a batch brings more images or a larger side: a few times a run.
  void size_pool(int n, int w, int h, JpegDecodeStats& counts) {
    n = std::max(n, pool_images);
    seen_width = std::max(seen_width, w);
    seen_height = std::max(seen_height, h);
    w = seen_width;
    h = seen_height;
    const double bytes = 4.0 * n * w * h;
    if (bytes > static_cast<double>(budget_bytes)) {
      const double shrink = std::sqrt(static_cast<double>(budget_bytes) / bytes);
      w = std::max(1, static_cast<int>(w * shrink));
      h = std::max(1, static_cast<int>(h * shrink));
    }
    if (n == pool_images && w == pool_width && h == pool_height) return;
    const nvjpegStatus_t s = nvjpegDecodeBatchedPreAllocate(hardware, hardware_state, n, w, h, NVJPEG_CSS_444,
                                                            NVJPEG_OUTPUT_RGBI);
    const std::string size = std::to_string(n) + " images of " + std::to_string(w) + "x" + std::to_string(h);
    pool_images = n, pool_width = w, pool_height = h;  // not asked again after a failure either
    if (s != NVJPEG_STATUS_SUCCESS) {  // slower, not wrong: nvJPEG allocates as it goes
      log::warn("nvJPEG could not size its hardware pool for " + size + " (" + status_name(s) + ")");
      return;
    }
    counts.pool_images = n, counts.pool_width = w, counts.pool_height = h;
  }

  // The job that normalises sample `index` of `pixels` ((B, S, S, 3) uint8: the CPU's pixels) as it is.
  CropResizeJob pixels_job(const at::Tensor& pixels, int64_t index) const {
    const int s = transform.size;
    const uint8_t* src = pixels.data_ptr<uint8_t>() + index * pixels.stride(0);
    return {src, s * 3, s, s, 1, 0, 0, s, s, 0, static_cast<int>(index)};
  }

  // The CPU path's pixels for a file nvJPEG refused, copied into its sample of `pixels` (a blocking copy from
  // pageable memory: rare, and the buffer is free for the next one when it returns).
  void decode_on_cpu(const data::EncodedImage& e, int64_t index, const at::Tensor& pixels) {
    const size_t bytes = data::bytes_per_image(data::PixelFormat::kUint8Hwc, transform.size);
    cpu_pixels.resize(bytes);
    data::decode_box_into(e.bytes.data(), e.bytes.size(), e.box, transform, scratch, cpu_pixels.data());
    const at::Tensor host = at::from_blob(cpu_pixels.data(), {transform.size, transform.size, 3}, at::kByte);
    pixels[index].copy_(host);
  }

  // `bytes` of the output pool for the current chunk. Growing it (the first batches, a larger image) waits for
  // everything issued before; the old pool, if this chunk placed images in it, stays in `retired` until the chunk's
  // work is issued.
  uint8_t* output_space(size_t bytes, cudaStream_t stream, std::vector<at::Tensor>& retired) {
    const size_t have = output_pool.defined() ? static_cast<size_t>(output_pool.numel()) : 0;
    if (output_used + bytes > have) {
      C10_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (state_used) C10_CUDA_CHECK(cudaEventSynchronize(state_done));
      if (output_used > 0) retired.push_back(output_pool);
      const size_t want = (output_used + bytes) / 4 * 5 + (size_t{1} << 20);  // the next chunks: room to spare
      output_pool = at::empty({static_cast<int64_t>(want)}, at::TensorOptions().dtype(at::kByte).device(device));
      output_used = 0;
    }
    uint8_t* p = output_pool.data_ptr<uint8_t>() + output_used;
    output_used += bytes;
    return p;
  }

  // The jobs' table goes to the device on `stream`, then the kernel. Anything the jobs read must stay allocated
  // until this is issued (stream order keeps it after that).
  void resize_into(const std::vector<CropResizeJob>& jobs, const ModelInput& out, cudaStream_t stream) const {
    if (jobs.empty()) return;
    const int64_t job_bytes = static_cast<int64_t>(jobs.size() * sizeof(CropResizeJob));
    const at::Tensor job_buffer = at::empty({job_bytes}, at::TensorOptions().dtype(at::kByte).device(device));
    // From pageable memory: staged before the call returns, so `jobs` may go at once.
    C10_CUDA_CHECK(cudaMemcpyAsync(job_buffer.data_ptr(), jobs.data(), job_bytes, cudaMemcpyHostToDevice, stream));
    crop_resize(reinterpret_cast<const CropResizeJob*>(job_buffer.data_ptr()), static_cast<int>(jobs.size()), out,
                transform.size, stream);
  }

  void decode_chunk(const data::EncodedImage* images, const std::vector<int64_t>& chunk, const at::Tensor& pixels,
                    const ModelInput& out, cudaStream_t stream, JpegDecodeStats& counts) {
    // Where each image is decoded to: the hardware engines write only the crop's pixels (ROI decode: less memory,
    // and nvJPEG's colour conversion kernel touches only those), the one-at-a-time paths the whole image.
    std::vector<char> on_hardware(chunk.size(), 0);
    std::vector<Region> region(chunk.size());
    for (size_t k = 0; k < chunk.size(); ++k) {
      const data::EncodedImage& e = images[chunk[k]];
      on_hardware[k] = hardware != nullptr && e.kind == data::JpegRoute::kHardware;
      region[k] = on_hardware[k] ? crop_region(e) : Region{0, 0, e.width, e.height};
    }
    std::vector<uint8_t*> decoded_to(chunk.size(), nullptr);  // each image's decode buffer
    std::vector<at::Tensor> retired;  // an outgrown pool this chunk placed images in, held until its work is issued
    int64_t buffer_bytes = 0;
    output_used = 0;
    // Room in the output pool for the images at `which`, laid out one after another.
    auto place = [&](const std::vector<size_t>& which) {
      size_t total = 0;
      for (size_t k : which) total += region[k].bytes();
      if (total == 0) return;
      uint8_t* p = output_space(total, stream, retired);
      buffer_bytes += static_cast<int64_t>(total);
      counts.peak_buffer_bytes = std::max(counts.peak_buffer_bytes, buffer_bytes);
      for (size_t k : which) decoded_to[k] = p, p += region[k].bytes();
    };
    auto destination = [&](size_t k) {
      nvjpegImage_t d{};
      d.channel[0] = decoded_to[k];
      d.pitch[0] = static_cast<size_t>(region[k].w) * 3;
      return d;
    };
    {
      std::vector<size_t> all(chunk.size());
      for (size_t k = 0; k < chunk.size(); ++k) all[k] = k;
      place(all);
    }

    std::vector<char> decoded(chunk.size(), 0);
    // The hardware engines: every baseline image of the chunk in one call.
    std::vector<size_t> batch;  // positions in chunk
    for (size_t k = 0; k < chunk.size(); ++k) {
      if (on_hardware[k]) batch.push_back(k);
    }
    if (!batch.empty()) {
      std::vector<const unsigned char*> data;
      std::vector<size_t> lengths;
      std::vector<nvjpegImage_t> destinations;
      const int n = static_cast<int>(batch.size());
      while (params.size() < batch.size()) {
        params.push_back(nullptr);
        check(nvjpegDecodeParamsCreate(hardware, &params.back()), "decode params");
        check(nvjpegDecodeParamsSetOutputFormat(params.back(), NVJPEG_OUTPUT_RGBI), "decode params output format");
      }
      nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
      for (int b = 0; b < n && s == NVJPEG_STATUS_SUCCESS; ++b) {
        const size_t k = batch[b];
        data.push_back(images[chunk[k]].bytes.data());
        lengths.push_back(images[chunk[k]].bytes.size());
        destinations.push_back(destination(k));
        s = nvjpegDecodeParamsSetROI(params[b], region[k].x, region[k].y, region[k].w, region[k].h);
      }
      if (state_used) C10_CUDA_CHECK(cudaEventSynchronize(state_done));
      if (s == NVJPEG_STATUS_SUCCESS) {
        int w = 1, h = 1;
        for (size_t k : batch) w = std::max(w, images[chunk[k]].width), h = std::max(h, images[chunk[k]].height);
        size_pool(n, w, h, counts);
      }
      if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegDecodeBatchedInitialize(hardware, hardware_state, n, 1, NVJPEG_OUTPUT_RGBI);
      if (s == NVJPEG_STATUS_SUCCESS) {
        s = nvjpegDecodeBatchedEx(hardware, hardware_state, data.data(), lengths.data(), destinations.data(),
                                  params.data(), stream);
      }
      C10_CUDA_CHECK(cudaEventRecord(state_done, stream));
      state_used = true;
      if (s == NVJPEG_STATUS_SUCCESS) {
        for (size_t k : batch) decoded[k] = 1;
        counts.hardware += n;
      } else {
        // Decoded one at a time below, whole: room for the whole images.
        for (size_t k : batch) region[k] = Region{0, 0, images[chunk[k]].width, images[chunk[k]].height};
        place(batch);
        if (++failed_batches <= kLoggedFailures) {
          log::warn(std::string("nvJPEG hardware batch of ") + std::to_string(n) + " failed (" + status_name(s) +
                    "); decoding its images one at a time" +
                    (failed_batches == kLoggedFailures ? " (further failures are not logged)" : ""));
        }
      }
    }
    // One at a time: the rest, and a hardware batch that failed.
    std::vector<CropResizeJob> jobs;
    for (size_t k = 0; k < chunk.size(); ++k) {
      if (decoded[k]) continue;
      const data::EncodedImage& e = images[chunk[k]];
      nvjpegImage_t d = destination(k);
      const nvjpegStatus_t s = nvjpegDecode(single, single_state, e.bytes.data(), e.bytes.size(), NVJPEG_OUTPUT_RGBI, &d, stream);
      // The single-image state is reused by the next call: let this image's device work finish first (the hybrid
      // path is for the few files the engines do not take). Without it, the first of two progressive files in a
      // chunk came out as garbage.
      C10_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (s == NVJPEG_STATUS_SUCCESS) {
        decoded[k] = 1;
        ++counts.hybrid;
      } else {
        decode_on_cpu(e, chunk[k], pixels);
        jobs.push_back(pixels_job(pixels, chunk[k]));
        ++counts.cpu_fallback;
      }
    }

    for (size_t k = 0; k < chunk.size(); ++k) {
      if (!decoded[k]) continue;
      const data::EncodedImage& e = images[chunk[k]];
      const int r = e.reduction;
      const data::CropBox c = shrunk_crop(e);
      const Region& g = region[k];  // its corner is a multiple of r: the crop relative to it stays whole blocks
      jobs.push_back({decoded_to[k], g.w * 3, g.w, g.h, r, c.x - g.x / r, c.y - g.y / r, c.w, c.h, c.flip ? 1 : 0,
                      static_cast<int>(chunk[k])});
    }
    resize_into(jobs, out, stream);  // while `retired` still holds any pixels placed in an outgrown pool
  }
};

std::string JpegDecoder::unavailable_reason() {
  return c10::cuda::device_count() > 0 ? "" : "no CUDA device";
}

JpegDecoder::JpegDecoder(c10::Device device, const data::TransformOptions& transform, int64_t budget_bytes) {
  const c10::cuda::CUDAGuard guard(device);
  impl_ = std::make_unique<Impl>(device, transform, budget_bytes);
}

JpegDecoder::~JpegDecoder() = default;

void JpegDecoder::decode(const data::EncodedImage* images, int64_t count, const at::Tensor& pixels,
                         const at::Tensor& out, const c10::Stream& stream) {
  Impl& d = *impl_;
  if (!pixels.is_cuda() || pixels.scalar_type() != at::kByte || !pixels.is_contiguous() || pixels.dim() != 4 ||
      pixels.size(0) < count || pixels.size(1) != pixels.size(2) || pixels.size(3) != 3) {
    throw std::invalid_argument("JpegDecoder::decode: pixels must be a contiguous (B, S, S, 3) uint8 CUDA tensor");
  }
  // The batch's side (a resolution schedule changes it by epoch): the crops are resized to it.
  const int64_t s = pixels.size(1);
  d.transform.size = static_cast<int>(s);
  const bool bytes = out.scalar_type() == at::kByte;
  if (!out.is_cuda() || (out.scalar_type() != at::kFloat && out.scalar_type() != at::kHalf && !bytes) ||
      out.dim() != 4 || out.size(0) != count || (out.size(1) != 3 && (out.size(1) != 4 || bytes)) ||
      out.size(2) != s || out.size(3) != s ||
      !(out.is_contiguous() || out.is_contiguous(at::MemoryFormat::ChannelsLast))) {
    throw std::invalid_argument("JpegDecoder::decode: out must be a (count, 3 or 4, S, S) float32 or float16 CUDA "
                                "tensor, or a (count, 3, S, S) uint8 one, contiguous or channels_last");
  }
  ModelInput input{out.data_ptr(), out.scalar_type() == at::kHalf, bytes, static_cast<int>(out.size(1)),
                   out.stride(0),  out.stride(1), out.stride(2), out.stride(3), {}, {}};
  const data::PixelAffine affine = data::uint8_normalisation(d.transform);
  std::copy(affine.scale, affine.scale + 3, input.scale);
  std::copy(affine.shift, affine.shift + 3, input.shift);
  if (bytes) {  // the pixels themselves: u * 1 + 0
    std::fill(input.scale, input.scale + 3, 1.0f);
    std::fill(input.shift, input.shift + 3, 0.0f);
  }
  const c10::cuda::CUDAStream cuda_stream(stream);
  const c10::cuda::CUDAStreamGuard guard(cuda_stream);  // the buffers below are allocated on, and used by, it
  if (d.last_stream != nullptr && d.last_stream != cuda_stream.stream()) {
    C10_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream.stream(), d.last_done, 0));
  }
  JpegDecodeStats counts;
  std::vector<CropResizeJob> cpu_decoded;  // the samples whose pixels the workers made
  for (int64_t i = 0; i < count; ++i) {
    if (images[i].kind == data::JpegRoute::kCpu) cpu_decoded.push_back(d.pixels_job(pixels, i));
  }
  d.resize_into(cpu_decoded, input, cuda_stream.stream());
  // Chunks of images whose full-size RGB fits the budget (an image over it alone is a chunk of its own).
  std::vector<int64_t> chunk;
  size_t chunk_bytes = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (images[i].kind == data::JpegRoute::kCpu) continue;
    const size_t bytes = rgb_bytes(images[i]);
    if (!chunk.empty() && chunk_bytes + bytes > static_cast<size_t>(d.budget_bytes)) {
      d.decode_chunk(images, chunk, pixels, input, cuda_stream.stream(), counts);
      chunk.clear();
      chunk_bytes = 0;
    }
    chunk.push_back(i);
    chunk_bytes += bytes;
  }
  if (!chunk.empty()) d.decode_chunk(images, chunk, pixels, input, cuda_stream.stream(), counts);
  if (d.last_done == nullptr) C10_CUDA_CHECK(cudaEventCreateWithFlags(&d.last_done, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(d.last_done, cuda_stream.stream()));
  d.last_stream = cuda_stream.stream();
  std::lock_guard<std::mutex> lock(d.stats_mutex);
  d.stats.hardware += counts.hardware;
  d.stats.hybrid += counts.hybrid;
  d.stats.cpu_fallback += counts.cpu_fallback;
  d.stats.peak_buffer_bytes = std::max(d.stats.peak_buffer_bytes, counts.peak_buffer_bytes);
  if (counts.pool_images > 0) {
    d.stats.pool_images = counts.pool_images;
    d.stats.pool_width = counts.pool_width;
    d.stats.pool_height = counts.pool_height;
  }
}

JpegDecodeStats JpegDecoder::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

}  // namespace pinfeed::pipeline

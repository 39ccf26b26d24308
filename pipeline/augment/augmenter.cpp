#include "pipeline/augment/augmenter.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace pinfeed::pipeline::augment {
namespace {

// A host tensor holding `values`, page-locked when it is to cross to a CUDA device: LibTorch's caching host
// allocator then keeps its block until the non-blocking copy that reads it has run.
template <class T>
at::Tensor host_tensor(const std::vector<T>& values, c10::ScalarType dtype, bool pinned) {
  at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::TensorOptions().dtype(dtype).pinned_memory(pinned));
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace

Augmenter::Augmenter(AugmentOptions options, DrawKeys keys, c10::Device device)
    : options_(options), keys_(keys), device_(device) {
  pixel_options_.interpolation = options_.interpolation;
  pixel_options_.fill = options_.fill;
  if (options_.mixing() && options_.num_classes <= 0) {
    throw std::invalid_argument("augment: Mixup/CutMix needs the number of classes");
  }
}

const OpSpace& Augmenter::space(int side) const {
  auto& s = spaces_[side];
  if (!s) s = std::make_unique<OpSpace>(options_.auto_augment, side, side);
  return *s;
}

BatchDraws Augmenter::draw(int64_t epoch, int64_t index, int64_t size, int side) const {
  BatchDraws d;
  d.epoch = epoch;
  d.index = index;
  d.size = size;
  d.side = side;
  const uint64_t e = static_cast<uint64_t>(epoch);
  const auto key = [&](uint64_t position, Purpose purpose) {
    // This rank's positions interleaved with the other ranks': no two samples of a run share a key.
    return data::stream_seed(keys_.seed, e, position * static_cast<uint64_t>(keys_.shards) + static_cast<uint64_t>(keys_.shard_rank),
                             static_cast<uint64_t>(purpose));
  };
  const uint64_t first = static_cast<uint64_t>(index * keys_.batch_size);
  if (options_.pixel_ops()) {
    const OpSpace& s = space(side);
    d.ops.resize(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      data::SampleRng rng(key(first + static_cast<uint64_t>(i), Purpose::kPixelOps));
      d.ops[static_cast<size_t>(i)] = s.draw(rng);
    }
  }
  if (options_.erasing()) {
    d.erasing.resize(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      data::SampleRng rng(key(first + static_cast<uint64_t>(i), Purpose::kErasing));
      d.erasing[static_cast<size_t>(i)] = draw_erasing(options_, side, side, rng);
    }
    d.noise_seed = key(static_cast<uint64_t>(index), Purpose::kNoise);
  }
  if (options_.mixing()) {
    data::SampleRng rng(key(static_cast<uint64_t>(index), Purpose::kMix));
    d.mix = draw_mix(options_, side, side, rng);
  }
  return d;
}

DeviceDraws Augmenter::upload(const BatchDraws& d) const {
  // Everything in two host buffers (indices and boxes; op parameters), then one copy each.
  std::vector<int64_t> ints;
  std::vector<float> floats;
  struct Span {
    Kind kind;
    int64_t first_int, first_float, n;
  };
  std::vector<std::vector<Span>> rounds;
  size_t depth = 0;
  for (const auto& ops : d.ops) depth = std::max(depth, ops.size());
  for (size_t r = 0; r < depth; ++r) {
    std::vector<Span> spans;
    for (int k = 1; k < kKinds; ++k) {  // kNone (Identity) applies nothing
      Span span{static_cast<Kind>(k), static_cast<int64_t>(ints.size()), static_cast<int64_t>(floats.size()), 0};
      for (size_t i = 0; i < d.ops.size(); ++i) {
        if (r >= d.ops[i].size() || kind_of(d.ops[i][r].op) != span.kind) continue;
        const OpDraw& op = d.ops[i][r];
        ints.push_back(static_cast<int64_t>(i));
        const OpParams p = op_params(op.op, op.magnitude, d.side, d.side);
        floats.insert(floats.end(), p.begin(), p.end());
        ++span.n;
      }
      if (span.n > 0) spans.push_back(span);
    }
    rounds.push_back(std::move(spans));
  }
  const int64_t erase_first = static_cast<int64_t>(ints.size());
  int64_t erased = 0;
  for (size_t i = 0; i < d.erasing.size(); ++i) {
    if (!d.erasing[i].erased()) continue;
    ints.push_back(static_cast<int64_t>(i));
    ++erased;
  }
  for (const ErasingBox& b : d.erasing) {
    if (b.erased()) ints.insert(ints.end(), {b.top, b.left, b.height, b.width});
  }
  DeviceDraws out;
  if (ints.empty()) return out;
  const bool pinned = device_.is_cuda();
  const auto on_device = at::TensorOptions().device(device_);
  const at::Tensor int_dev = host_tensor(ints, at::kLong, pinned).to(on_device, /*non_blocking=*/pinned);
  const at::Tensor float_dev =
      floats.empty() ? at::Tensor() : host_tensor(floats, at::kFloat, pinned).to(on_device, /*non_blocking=*/pinned);
  for (const auto& spans : rounds) {
    std::vector<DeviceDraws::Group> groups;
    for (const Span& s : spans) {
      groups.push_back({s.kind, int_dev.narrow(0, s.first_int, s.n), float_dev.narrow(0, s.first_float, s.n * kParams).view({s.n, kParams})});
    }
    out.rounds.push_back(std::move(groups));
  }
  out.erase_index = int_dev.narrow(0, erase_first, erased);
  out.erase_boxes = int_dev.narrow(0, erase_first + erased, erased * 4).view({erased, 4});
  return out;
}

void Augmenter::apply_pixels(at::Tensor& pixels, const DeviceDraws& dd) const {
  for (const auto& groups : dd.rounds) {
    for (const auto& g : groups) {
      const at::Tensor chosen = pixels.index_select(0, g.index).permute({0, 3, 1, 2});  // (n, 3, S, S) views
      const at::Tensor done = apply_kind(g.kind, chosen, g.params, pixel_options_);
      pixels.index_copy_(0, g.index, done.permute({0, 2, 3, 1}));
    }
  }
}

void Augmenter::apply_batch(at::Tensor& images, at::Tensor& labels, const BatchDraws& d, const DeviceDraws& dd) const {
  if (dd.erase_index.defined() && dd.erase_index.numel() > 0) {
    std::optional<at::Generator> noise;
    if (options_.erasing_value == ErasingValue::kRandom) {
      noise = at::globalContext().defaultGenerator(images.device()).clone();
      noise->set_current_seed(d.noise_seed);
    }
    erase(images, dd.erase_index, dd.erase_boxes, options_.erasing_value, noise);
  }
  if (options_.mixing()) mix(images, labels, d.mix, options_.num_classes, options_.label_smoothing);
}

void Augmenter::apply_labels(at::Tensor& labels, const BatchDraws& d) const {
  if (options_.mixing()) labels = soft_targets(labels, d.mix, options_.num_classes, options_.label_smoothing);
}

}  // namespace pinfeed::pipeline::augment

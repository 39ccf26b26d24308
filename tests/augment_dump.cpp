// Writes what pinfeed's augmentations (pipeline/augment/) make of fixed inputs on the CPU, with the draws and
// parameters behind each output, for check_augment.py to hold against torchvision and timm. Raw little-endian
// arrays and a manifest.json naming them. Usage: augment_dump OUT_DIR
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline/augment/augmenter.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pinfeed::pipeline::augment;

namespace {

fs::path out_dir;
int files = 0;

// The tensor's bytes, contiguous, to a new file; returns its name.
std::string save(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const std::string name = "a" + std::to_string(files++) + ".bin";
  std::ofstream f(out_dir / name, std::ios::binary);
  f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!f) throw std::runtime_error("cannot write " + (out_dir / name).string());
  return name;
}

// Four (3, S, S) test images: smooth patterns with noise over the whole range, a low-contrast one, one with a
// flat channel, uniform noise.
at::Tensor test_images(int side) {
  at::Tensor t = at::empty({4, 3, side, side}, at::kByte);
  uint8_t* p = t.data_ptr<uint8_t>();
  pinfeed::data::SampleRng rng(side);
  for (int n = 0; n < 4; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < side; ++y) {
        for (int x = 0; x < side; ++x) {
          const double smooth = 127.5 + 100 * std::sin(0.21 * x + 0.9 * c) * std::cos(0.13 * y - 0.4 * c) + 0.2 * (x - y);
          const double noise = static_cast<double>(rng.below(41)) - 20;
          double v = 0;
          switch (n) {
            case 0: v = smooth + noise; break;
            case 1: v = 120 + 0.25 * (smooth - 127.5) + 0.3 * noise; break;
            case 2: v = c == 1 ? 77 : smooth; break;
            default: v = static_cast<double>(rng.below(256)); break;
          }
          p[((n * 3 + c) * side + y) * side + x] = static_cast<uint8_t>(std::lround(std::fmin(255.0, std::fmax(0.0, v))));
        }
      }
    }
  }
  return t;
}

json draw_json(const OpDraw& d) {
  return {{"op", op_name(d.op)}, {"bin", d.bin}, {"negative", d.negative}, {"magnitude", d.magnitude}};
}

json interpolation_json(const PixelOpOptions& o) {
  json j = {{"interpolation", o.interpolation == Interpolation::kNearest ? "nearest" : "bilinear"}};
  j["fill"] = o.fill ? json(std::vector<float>(o.fill->begin(), o.fill->end())) : json(nullptr);
  return j;
}

// Every op of each space at a spread of bins and both signs, on the test images at once.
json op_cases(int side, const at::Tensor& images) {
  json cases = json::array();
  const PolicyOptions spaces[] = {{Policy::kTrivialAugmentWide, 2, 9}, {Policy::kRandAugment, 2, 9},
                                  {Policy::kAutoAugmentImageNet, 2, 9}};
  const PixelOpOptions nearest, bilinear{Interpolation::kBilinear, std::nullopt},
      nearest_fill{Interpolation::kNearest, std::array<float, 3>{124, 116, 104}},
      bilinear_fill{Interpolation::kBilinear, std::array<float, 3>{124, 116, 104}};
  for (const PolicyOptions& policy : spaces) {
    const OpSpace space(policy, side, side);
    std::vector<int> bins;
    for (int b = 0; b < space.bins(); b += space.bins() > 10 ? 5 : 2) bins.push_back(b);
    if (bins.back() != space.bins() - 1) bins.push_back(space.bins() - 1);
    for (Op op : space.ops()) {
      const bool affine = kind_of(op) == Kind::kAffine;
      std::vector<PixelOpOptions> variants = {nearest};
      if (affine && policy.policy == Policy::kTrivialAugmentWide) variants = {nearest, bilinear, nearest_fill, bilinear_fill};
      for (int bin : space.has_magnitudes(op) ? bins : std::vector<int>{-1}) {
        for (bool negative : OpSpace::is_signed(op) ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
          for (const PixelOpOptions& o : variants) {
            const double m = space.magnitude(op, bin, negative);
            const OpParams p = op_params(op, m, side, side);
            const at::Tensor params = at::tensor(std::vector<float>(p.begin(), p.end())).view({1, kParams}).repeat({images.size(0), 1});
            const at::Tensor out = apply_kind(kind_of(op), images, params, o);
            json c = {{"space", policy_text(policy)}, {"side", side}, {"op", op_name(op)}, {"bin", bin},
                      {"negative", negative}, {"magnitude", m}, {"out", save(out)}};
            c.update(interpolation_json(o));
            cases.push_back(c);
          }
        }
      }
    }
  }
  return cases;
}

// A batch through the Augmenter: each image's own draws, in one pass per op kind and round.
json batch_cases(int side) {
  json cases = json::array();
  const char* policies[] = {"trivial", "rand-m9-n2", "rand-m27-n3", "imagenet"};
  int seed = 0;
  for (const char* text : policies) {
    for (bool fill : {false, true}) {
      AugmentOptions o;
      o.auto_augment = parse_policy(text);
      if (fill) o.fill = std::array<float, 3>{124, 116, 104};
      const Augmenter augmenter(o, DrawKeys{static_cast<uint64_t>(++seed), 16, 0, 1}, c10::Device(c10::kCPU));
      const BatchDraws d = augmenter.draw(/*epoch=*/3, /*index=*/1, 16, side);
      at::Tensor images = at::randint(0, 256, {16, side, side, 3}, at::TensorOptions().dtype(at::kByte));
      const at::Tensor input = images.clone();
      augmenter.apply_pixels(images, augmenter.upload(d));
      json draws = json::array();
      for (const auto& ops : d.ops) {
        json one = json::array();
        for (const OpDraw& op : ops) one.push_back(draw_json(op));
        draws.push_back(one);
      }
      json c = {{"policy", text}, {"side", side}, {"input", save(input.permute({0, 3, 1, 2}))},
                {"output", save(images.permute({0, 3, 1, 2}))}, {"draws", draws}};
      c.update(interpolation_json({o.interpolation, o.fill}));
      cases.push_back(c);
    }
  }
  return cases;
}

json erasing_cases(int side) {
  json cases = json::array();
  for (ErasingValue value : {ErasingValue::kZero, ErasingValue::kRandom}) {
    AugmentOptions o;
    o.erasing_p = 0.6;
    o.erasing_value = value;
    const Augmenter augmenter(o, DrawKeys{7, 32, 0, 1}, c10::Device(c10::kCPU));
    const BatchDraws d = augmenter.draw(0, 5, 32, side);
    at::Tensor images = at::randn({32, 3, side, side});
    const at::Tensor input = images.clone();
    at::Tensor labels = at::zeros({32}, at::kLong);
    augmenter.apply_batch(images, labels, d, augmenter.upload(d));
    json boxes = json::array();
    for (const ErasingBox& b : d.erasing) boxes.push_back({b.top, b.left, b.height, b.width});
    cases.push_back({{"value", value == ErasingValue::kZero ? "zero" : "random"}, {"side", side}, {"p", o.erasing_p},
                     {"scale", {o.erasing_scale_min, o.erasing_scale_max}}, {"ratio", {o.erasing_ratio_min, o.erasing_ratio_max}},
                     {"input", save(input)}, {"output", save(images)}, {"boxes", boxes}});
  }
  return cases;
}

json mix_cases(int side) {
  json cases = json::array();
  struct Setting {
    double mixup, cutmix, prob, switch_prob, smoothing;
  };
  const Setting settings[] = {{0.8, 1.0, 1.0, 0.5, 0.1}, {0.2, 0, 1.0, 0.5, 0.0}, {0, 1.0, 0.7, 0.5, 0.1}, {0.8, 1.0, 0.5, 0.3, 0.0}};
  const int64_t classes = 10, batch = 8;
  for (const Setting& s : settings) {
    AugmentOptions o;
    o.mixup_alpha = s.mixup;
    o.cutmix_alpha = s.cutmix;
    o.mix_prob = s.prob;
    o.switch_prob = s.switch_prob;
    o.label_smoothing = s.smoothing;
    o.num_classes = classes;
    const Augmenter augmenter(o, DrawKeys{11, batch, 0, 1}, c10::Device(c10::kCPU));
    for (int64_t index = 0; index < 6; ++index) {
      const BatchDraws d = augmenter.draw(2, index, batch, side);
      at::Tensor images = at::randn({batch, 3, side, side});
      const at::Tensor input = images.clone();
      at::Tensor labels = at::randint(0, classes, {batch}, at::TensorOptions().dtype(at::kLong));
      const at::Tensor input_labels = labels.clone();
      augmenter.apply_batch(images, labels, d, augmenter.upload(d));
      const MixDraw& m = d.mix;
      cases.push_back({{"mixup_alpha", s.mixup}, {"cutmix_alpha", s.cutmix}, {"prob", s.prob},
                       {"switch_prob", s.switch_prob}, {"smoothing", s.smoothing}, {"classes", classes},
                       {"side", side}, {"batch", batch}, {"input", save(input)}, {"labels", save(input_labels)},
                       {"output", save(images)}, {"targets", save(labels)},
                       {"draw", {{"cutmix", m.cutmix}, {"beta", m.beta}, {"lam", m.lam}, {"cy", m.cy}, {"cx", m.cx},
                                 {"box", {m.yl, m.yh, m.xl, m.xh}}}}});
    }
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: augment_dump OUT_DIR\n");
    return 2;
  }
  out_dir = argv[1];
  fs::create_directories(out_dir);
  at::set_num_threads(1);  // small tensors: a thread pool only spins against the machine's other work
  at::manual_seed(0);
  json manifest = {{"images", json::object()}, {"ops", json::array()}, {"batches", json::array()},
                   {"erasing", json::array()}, {"mix", json::array()}};
  for (int side : {40, 33}) {
    const at::Tensor images = test_images(side);
    manifest["images"][std::to_string(side)] = save(images);
    for (auto& c : op_cases(side, images)) manifest["ops"].push_back(c);
    for (auto& c : batch_cases(side)) manifest["batches"].push_back(c);
  }
  manifest["erasing"] = erasing_cases(40);
  manifest["mix"] = mix_cases(24);
  std::ofstream(out_dir / "manifest.json") << manifest.dump(1) << "\n";
  std::printf("%d arrays in %s\n", files, out_dir.c_str());
  return 0;
}

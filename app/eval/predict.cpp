#include "app/eval/predict.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/softmax.h>
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <tuple>

#include "app/config/config.h"
#include "engine/exit_codes.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/signals.h"
#include "app/train/resume.h"
#include "common/log.h"
#include "data/dataset/image_folder.h"
#include "data/transform/transforms.h"
#include "model/resnet.h"
#include "gpu/gpu.h"
#include "pipeline/error_text.h"

namespace pinfeed::app {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kBatch = 32;  // images per forward pass

c10::Device predict_device(const std::string& name, const std::string& where) {
  if (name == "auto") return gpu::available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  std::optional<c10::Device> device;
  try {
    device = c10::Device(name);
  } catch (const c10::Error&) {
    throw ConfigError(where + ": device \"" + name + "\" is not auto, cpu, cuda or cuda:N");
  }
  if (!device->is_cpu() && !device->is_cuda()) throw ConfigError(where + ": device \"" + name + "\" is not auto, cpu, cuda or cuda:N");
  if (device->is_cuda() && !gpu::available()) throw ConfigError(where + ": device \"" + name + "\" but no CUDA device is available");
  return *device;
}

// The files to predict, in order: each file as given, each folder's images (recursively, sorted by path).
// A folder without images or a path that is not there is an input in error, kept in its place.
struct Input {
  std::string path;
  std::string error;
};
std::vector<Input> list_inputs(const std::vector<std::string>& args) {
  std::vector<Input> inputs;
  for (const std::string& arg : args) {
    std::error_code ec;
    if (!fs::is_directory(arg, ec)) {
      inputs.push_back({arg, ""});
      continue;
    }
    std::vector<Input> found;
    for (auto it = fs::recursive_directory_iterator(arg, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code entry_ec;
      const bool regular = it->is_regular_file(entry_ec);
      if (!data::is_image_file(it->path().filename().string()) || (!entry_ec && it->is_directory(entry_ec))) continue;
      // An image name that is no readable file (a FIFO, a device, a symlink loop or a dangling link) is said.
      found.push_back({it->path().string(), regular ? ""
                                            : entry_ec ? "cannot read: " + entry_ec.message()
                                                       : "not a regular file (a FIFO, device or socket)"});
    }
    std::sort(found.begin(), found.end(), [](const Input& x, const Input& y) { return x.path < y.path; });
    if (ec) found.push_back({arg, "cannot list the folder: " + ec.message()});  // what was listed is still predicted
    if (found.empty()) found.push_back({arg, "a folder without .jpg, .jpeg or .png files"});
    for (auto& f : found) inputs.push_back(std::move(f));
  }
  return inputs;
}

}  // namespace

void add_predict_options(CLI::App& cmd, PredictArgs& a) {
  cmd.add_option("--checkpoint", a.checkpoint,
                 "a pinfeed checkpoint (last.pt, best.pt) or a file of torch.save(model.state_dict())")
      ->required();
  cmd.add_option("--top-k", a.top_k, "classes shown per image")->check(CLI::Range(1, 1000000));
  cmd.add_flag("--json", a.json, "one JSON object per image (JSON Lines)");
  cmd.add_option("--config,-c", a.config,
                 "TOML config: its data.image_size, data.val_resize_ratio and train.device (default: the "
                 "checkpoint's recorded data keys)");
  cmd.add_option("--device", a.device, "auto | cpu | cuda | cuda:N (default: the -c config's train.device, else auto)");
  cmd.add_option("inputs", a.inputs, "image files or folders of images")->required();
}

int run_predict(const PredictArgs& a) {
  engine::install_signal_handlers();
  engine::Weights w = engine::load_weights(a.checkpoint);
  const WeightsNetwork weights_net = network_of(w.model, a.checkpoint);
  const int64_t num_classes = weights_net.num_classes;

  std::optional<Config> recorded;  // a pinfeed checkpoint's config; none in a state dict
  if (!w.config.empty()) {
    try {
      recorded = parse_config_string(w.config, a.checkpoint + " (its recorded config)");
    } catch (const ConfigError& e) {
      log::warn(error_text(e) + (a.config.empty() ? "; using the default transform (data.image_size = 224)" : ""));
    }
  }
  Config c;
  if (!a.config.empty()) c = load_config(a.config);
  else if (recorded) c.transform = recorded->transform;  // the transform the model was validated with
  // The network the weights were trained as, whatever -c says (as eval).
  if (recorded) c.step.net.blurpool = recorded->step.net.blurpool;
  const c10::Device device = predict_device(!a.device.empty() ? a.device : a.config.empty() ? "auto" : c.train.device,
                                            !a.device.empty() ? "--device" : location_of(c, "train.device"));
  // The validation transform at validation's side, decoded on the CPU.
  data::TransformOptions t = data::at_side(c.transform, data::side_of(c.transform, /*train=*/false, 0));
  t.format = data::PixelFormat::kFloat32Chw;
  t.gpu_decode = false;

  model::ResNetOptions options{num_classes, false, false, false};
  options.blurpool = c.step.net.blurpool;
  options.arch = weights_net.arch;
  model::ResNet net = model::resnet(options);
  copy_weights(net, w.model, a.checkpoint);
  w.model.clear();
  net->to(device);
  net->eval();
  auto name_of = [&](int64_t i) {
    return i < static_cast<int64_t>(w.classes.size()) ? w.classes[i] : std::to_string(i);
  };
  // Outputs past the named classes (a head trained wider than its folders) stand for no class: never ranked.
  const auto named = static_cast<int64_t>(w.classes.size());
  const int64_t ranked = named > 0 && named < num_classes ? named : num_classes;
  if (ranked < num_classes) {
    log::warn(a.checkpoint + " has " + std::to_string(num_classes) + " outputs but names " + std::to_string(named) +
              " classes: ranking those " + std::to_string(named));
  }
  const int64_t k = std::min<int64_t>(a.top_k, ranked);

  const std::vector<Input> inputs = list_inputs(a.inputs);
  const int64_t side = t.size, image_floats = 3 * side * side;
  int64_t bad = 0;
  data::DecodeScratch scratch;
  std::vector<uint8_t> file;
  for (size_t first = 0; first < inputs.size(); first += kBatch) {
    const size_t end = std::min(inputs.size(), first + kBatch);
    at::Tensor batch = at::empty({static_cast<int64_t>(end - first), 3, side, side});  // (B, 3, S, S) float32
    std::vector<std::string> errors(end - first);
    std::vector<int64_t> rows(end - first, -1);  // each input's row in the batch
    int64_t n = 0;
    for (size_t i = first; i < end; ++i) {
      errors[i - first] = inputs[i].error;
      if (!inputs[i].error.empty()) continue;
      try {
        data::read_file(inputs[i].path, file, t.max_file_bytes);
        data::SampleRng rng(0);  // the validation crop draws nothing
        data::decode_into(file.data(), file.size(), /*train=*/false, t, rng, scratch, batch.data_ptr<float>() + n * image_floats);
        rows[i - first] = n++;
      } catch (const std::exception& e) {
        errors[i - first] = error_text(e);
      }
    }
    at::Tensor top_p, top_i;
    if (n > 0) {
      at::NoGradGuard no_grad;
      const at::Tensor probs = at::softmax(net->forward(batch.narrow(0, 0, n).to(device)).narrow(1, 0, ranked).to(at::kFloat), 1);
      std::tie(top_p, top_i) = probs.topk(k, 1);
      top_p = top_p.cpu();
      top_i = top_i.cpu();
    }
    for (size_t i = first; i < end; ++i) {
      const std::string& path = inputs[i].path;
      const int64_t row = rows[i - first];
      if (row < 0) {
        ++bad;
        if (a.json) {
          std::printf("%s\n", nlohmann::json{{"path", path}, {"error", errors[i - first]}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        } else {
          log::error(data::printable(path) + ": " + errors[i - first]);
        }
        continue;
      }
      nlohmann::json top = nlohmann::json::array();
      std::string line = data::printable(path) + ":";
      for (int64_t j = 0; j < k; ++j) {
        const int64_t index = top_i[row][j].item<int64_t>();
        const double p = top_p[row][j].item<double>();
        top.push_back({{"index", index}, {"class", name_of(index)}, {"probability", p}});
        char prob[32];
        std::snprintf(prob, sizeof prob, " %.4f", p);
        line += (j ? ", " : " ") + data::printable(name_of(index)) + prob;
      }
      if (a.json) {
        std::printf("%s\n", nlohmann::json{{"path", path}, {"top", top}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else {
        std::printf("%s\n", line.c_str());
      }
    }
    std::fflush(stdout);
  }
  if (bad > 0) log::error(std::to_string(bad) + " of " + std::to_string(inputs.size()) + " input(s) could not be predicted");
  return bad > 0 ? static_cast<int>(engine::kExitData) : static_cast<int>(engine::kExitOk);
}

}  // namespace pinfeed::app

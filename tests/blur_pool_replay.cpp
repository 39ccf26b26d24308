// Runs tests/check_blur_pool.py's input through pinfeed's ResNet-50 with model.blurpool on and off, from the
// torchvision state dict the script saved, and compares the logits with torchvision's (with FFCV's BlurPool where
// on), in evaluation and in training mode. Usage: blur_pool_replay CASE.pt. Prints each comparison; exits 1 when
// one is past tolerance.
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "engine/checkpoint/torch_file.h"
#include "app/train/resume.h"
#include "model/resnet.h"

int main(int argc, char** argv) {
  using namespace pinfeed;
  if (argc != 2) {
    std::fprintf(stderr, "usage: blur_pool_replay CASE.pt\n");
    return 2;
  }
  try {
    at::NoGradGuard no_grad;
    const auto c = engine::parse_torch_file(engine::read_torch_file(argv[1]), argv[1]).toGenericDict();
    std::map<std::string, at::Tensor> state, outputs;
    for (const auto& item : c.at("state_dict").toGenericDict()) state[item.key().toStringRef()] = item.value().toTensor();
    for (const auto& item : c.at("outputs").toGenericDict()) outputs[item.key().toStringRef()] = item.value().toTensor();
    const at::Tensor images = c.at("images").toTensor();
    bool ok = true;
    for (const bool blur : {false, true}) {
      model::ResNetOptions options{10, false};
      options.blurpool = blur;
      model::ResNet net = model::resnet(options);
      net->to(at::kDouble);
      app::copy_weights(net, state, argv[1]);  // every name and shape, nothing more: torchvision's state dict
      for (const bool train : {false, true}) {
        net->train(train);
        const std::string name = std::string(blur ? "blurpool" : "plain") + (train ? "_train" : "_eval");
        const at::Tensor want = outputs.at(name), got = net->forward(images);
        // float64 throughout: only the order of the convolutions' sums differs.
        const double err = (got - want).abs().max().item<double>() / want.abs().max().item<double>();
        std::printf("%s: largest difference %.3g of the largest logit\n", name.c_str(), err);
        ok = ok && err <= 1e-9;
      }
    }
    // A blur that changed nothing would pass the above with either model: it must move the logits.
    const double moved = (outputs.at("blurpool_eval") - outputs.at("plain_eval")).abs().max().item<double>() /
                         outputs.at("plain_eval").abs().max().item<double>();
    std::printf("blurpool against plain: %.3g of the largest logit\n", moved);
    ok = ok && moved > 1e-3;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blur_pool_replay: %s\n", e.what());
    return 1;
  }
}

// The key table: every TOML key, once, bound to the field that consumes it (config_text.cpp writes the config
// out from it).
#include "app/config/keys.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>

#include "data/limits.h"

namespace pinfeed::app {
namespace {

using data::printable;
namespace augment = pipeline::augment;

template <class T>
Check<T> at_least(T lo) {
  return [lo](const T& v) {
    std::ostringstream s;
    if (v < lo) s << "must be >= " << lo << ", got " << v;
    return s.str();
  };
}

Check<int64_t> between(int64_t lo, int64_t hi) {
  return [lo, hi](const int64_t& v) {
    std::ostringstream s;
    if (v < lo) s << "must be >= " << lo << ", got " << v;
    if (v > hi) s << "must be <= " << hi << ", got " << v;
    return s.str();
  };
}

Check<double> in_range(double lo, double hi, bool hi_open = false) {
  return [=](const double& v) {
    std::ostringstream s;
    if (v < lo || v > hi || (hi_open && v == hi)) s << "must be in [" << lo << ", " << hi << (hi_open ? ")" : "]") << ", got " << v;
    return s.str();
  };
}

// (lo, hi]: for a factor or a divisor where lo itself would stop the key doing anything.
Check<double> above_up_to(double lo, double hi) {
  return [=](const double& v) {
    std::ostringstream s;
    if (v <= lo || v > hi) s << "must be in (" << lo << ", " << hi << "], got " << v;
    return s.str();
  };
}

std::string check_device(const std::string& v) {
  static const std::regex re("auto|cpu|cuda(:[0-9]+)?");
  return std::regex_match(v, re) ? "" : "must be \"auto\", \"cpu\", \"cuda\" or \"cuda:N\", got \"" + printable(v) + "\"";
}

// A newline or an escape sequence in a folder name is far likelier a paste accident than a real folder, and
// every message naming the path would carry it.
std::string check_path(const std::string& v) {
  if (std::none_of(v.begin(), v.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; })) return "";
  return "must not hold control characters, got \"" + printable(v) + "\"";
}

// A path key, "~/" expanded as it is read.
std::string path_of(const std::string& v) {
  if (std::string problem = check_path(v); !problem.empty()) throw std::invalid_argument(problem);
  return expand_user(v);
}
std::string as_written(const std::string& v) { return v; }

// The run folder is <run.dir>/<timestamp>-<name>: a name with '/' or ".." would put it (and every checkpoint)
// outside run.dir. 100 bytes leaves room for the timestamp and a "-N" suffix under NAME_MAX (255).
std::string check_run_name(const std::string& v) {
  constexpr size_t kMaxLength = 100;
  const bool control = std::any_of(v.begin(), v.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; });
  if (!v.empty() && v.size() <= kMaxLength && v.find('/') == std::string::npos && v.find("..") == std::string::npos &&
      !control) {
    return "";
  }
  return "must be a plain folder name (1 to " + std::to_string(kMaxLength) +
         " bytes, no '/', no \"..\", no control characters), got \"" + printable(v) + "\"";
}

std::string range_text(const std::optional<engine::StepRange>& r) { return r ? r->text() : ""; }

// Upper limits of the keys that size memory or threads (data/limits.h, shared with the Python module). The plan
// (app/plan/plan.cpp) checks the sizes they combine into against this machine.
using data::kMaxBatchSize;
using data::kMaxEpochs;
using data::kMaxImageSize;
using data::kMaxMegabytes;
using data::kMaxPrefetchBatches;
using data::kMinImageSize;

std::string zero_or_side(const int64_t& v) {
  if (v == 0 || (v >= kMinImageSize && v <= kMaxImageSize)) return "";
  return "must be 0 or in [" + std::to_string(kMinImageSize) + ", " + std::to_string(kMaxImageSize) + "], got " +
         std::to_string(v);
}
constexpr int64_t kMaxClasses = 100'000;  // ImageNet-21k has 21,841; fc alone is 0.8 GB at this bound
constexpr int64_t kMaxTimeoutS = 7 * 24 * 3600;  // a week; c10d converts to milliseconds

const Names<std::optional<bool>> kAutoOnOff = {{"auto", std::nullopt}, {"on", true}, {"off", false}};

Names<model::Arch> arch_names() {
  Names<model::Arch> names;
  for (const model::ArchSpec& a : model::arch_specs()) names.emplace_back(a.name, a.arch);
  return names;
}

Names<std::optional<pipeline::Mode>> mode_names() {
  // "" is the old spelling of "auto", still read.
  Names<std::optional<pipeline::Mode>> names = {{"auto", std::nullopt}, {"", std::nullopt}};
  for (const auto& p : pipeline::mode_presets()) names.emplace_back(p.name, p.mode);
  return names;
}

}  // namespace

const Names<engine::Precision>& precision_names() {
  static const Names<engine::Precision> names = {
      {"fp32", engine::Precision::kFp32}, {"tf32", engine::Precision::kTf32}, {"bf16", engine::Precision::kBf16}, {"fp16", engine::Precision::kFp16}};
  return names;
}

const Names<pipeline::Decoder>& decoder_names() {
  static const Names<pipeline::Decoder> names = {{"cpu", pipeline::Decoder::kCpu}, {"nvjpeg", pipeline::Decoder::kNvjpeg}, {"auto", pipeline::Decoder::kAuto}};
  return names;
}

const Names<Backend>& backend_names() {
  static const Names<Backend> names = {{"auto", Backend::kAuto}, {"nccl", Backend::kNccl}, {"gloo", Backend::kGloo}};
  return names;
}

const char* name_of(engine::Precision p) { return precision_names().at(static_cast<size_t>(p)).first.c_str(); }
const char* name_of(pipeline::Decoder d) { return decoder_names().at(static_cast<size_t>(d)).first.c_str(); }
const char* name_of(Backend b) { return backend_names().at(static_cast<size_t>(b)).first.c_str(); }

const std::vector<Key>& keys() {
  using model::GraphBatchNorm;
  static const std::vector<Key> table = {
      parsed("data.root", PINFEED_FIELD(dataset.root), path_of, as_written,
             "ImageFolder root holding <train_split>/ and <val_split>/; ~/ expands"),
      key("data.train_split", PINFEED_FIELD(dataset.train_split), check_path, "training split folder under root"),
      key("data.val_split", PINFEED_FIELD(dataset.val_split), check_path, "validation split folder under root"),
      key("data.image_size", PINFEED_FIELD(transform.size), between(kMinImageSize, kMaxImageSize),
          "side of the square crop fed to the model, px: in training unless a schedule below is set, and in validation "
          "unless data.val_image_size is"),
      key("data.val_image_size", PINFEED_FIELD(transform.val_size), zero_or_side,
          "validation's crop side, px; 0 = data.image_size"),
      key("data.val_resize_ratio", PINFEED_FIELD(transform.val_resize_ratio), in_range(data::kMinValResizeRatio, 1.0),
          "val: resize shorter side to side/ratio, centre crop"),
      key("data.image_size_min", PINFEED_FIELD(transform.schedule.min), zero_or_side,
          "progressive resizing (FFCV's min_res): the training side up to epoch data.ramp_start; 0 = no ramp"),
      key("data.image_size_max", PINFEED_FIELD(transform.schedule.max), zero_or_side,
          "the training side from epoch data.ramp_end (FFCV's max_res); linear between, rounded to data.ramp_step"),
      key("data.ramp_start", PINFEED_FIELD(transform.schedule.start_ramp), between(0, kMaxEpochs),
          "epoch the ramp leaves data.image_size_min, counted from 0 (FFCV's start_ramp)"),
      key("data.ramp_end", PINFEED_FIELD(transform.schedule.end_ramp), between(0, kMaxEpochs),
          "epoch the ramp reaches data.image_size_max, counted from 0 (FFCV's end_ramp); equal to data.ramp_start: "
          "the side jumps to the max the epoch after"),
      key("data.ramp_step", PINFEED_FIELD(transform.schedule.step), between(1, 512),
          "the ramp's sides are multiples of this, px (FFCV: 32)"),
      parsed("data.image_size_by_epoch", PINFEED_FIELD(transform.schedule.by_epoch),
             [](const std::string& v) { return data::parse_sides(v, kMinImageSize, kMaxImageSize, kMaxEpochs); }, data::sides_text,
             "the training side of each epoch, e.g. \"160*12, 192*4\" (12 epochs at 160, then 192); the last holds "
             "for later epochs; \"\" = off"),
      key("data.scale_min", PINFEED_FIELD(transform.scale_min), in_range(data::kMinScale, 1.0),
          "RandomResizedCrop smallest area fraction"),
      key("data.scale_max", PINFEED_FIELD(transform.scale_max), in_range(data::kMinScale, 1.0),
          "RandomResizedCrop largest area fraction"),
      key("data.hflip", PINFEED_FIELD(transform.hflip), "random horizontal flip in training"),
      key("data.crop_decode", PINFEED_FIELD(transform.crop_decode),
          "JPEG: decode only the crop region (libjpeg-turbo), DCT-scaled 1/2..1/8 when the crop allows; false: "
          "full OpenCV decode"),
      key("data.workers", PINFEED_FIELD(train_loader.workers), between(0, data::kMaxWorkers),
          "decode threads; 0 = cores - 3 (cores - 1 on 4 cores or fewer); at most 4 x cores"),
      key("data.prefetch_batches", PINFEED_FIELD(train_loader.prefetch_batches), between(1, kMaxPrefetchBatches),
          "batches decoded ahead of the training loop, across the end of an epoch too; the ring (this + 2 "
          "batches, train and val) must fit in half the RAM"),
      choice("data.on_bad_image", PINFEED_FIELD(dataset.on_bad_image),
             {{"skip", data::BadImagePolicy::kSkip}, {"fail", data::BadImagePolicy::kFail}},
             "a corrupt image is replaced and counted (skip) or stops the run (fail)"),
      key("data.max_image_pixels", PINFEED_FIELD(transform.max_image_pixels), at_least<int64_t>(0),
          "an image whose header declares more pixels is a bad image (on_bad_image applies), refused before "
          "decoding; 0 = no limit"),
      mebibytes("data.max_file_mb", PINFEED_FIELD(transform.max_file_bytes), between(0, kMaxMegabytes),
                "a file larger than this (MiB) is a bad image, refused before it is read; 0 = no limit"),
      key("data.sample_timeout_s", PINFEED_FIELD(train_loader.sample_timeout_s), in_range(0.0, data::kMaxSampleTimeoutS),
          "a sample still loading after this many seconds (a read or decode that never returns) stops the run "
          "naming its file (exit 3); 0 = no bound"),
      choice("data.decoder", PINFEED_FIELD(dataset.decoder), decoder_names(),
             "cpu (libjpeg-turbo in the workers) | nvjpeg (the GPU decodes JPEGs, workers only read files; CUDA "
             "only; on a CPU it falls back to cpu with a warning) | auto (nvjpeg on CUDA when built in)"),
      key("data.nvjpeg_share", PINFEED_FIELD(transform.nvjpeg_share), in_range(0.0, 1.0),
          "with data.decoder = nvjpeg: the fraction of samples (fixed by index) whose JPEGs the GPU decodes; the "
          "workers decode the rest"),
      parsed("data.auto_augment", PINFEED_FIELD(augment.auto_augment), augment::parse_policy, augment::policy_text,
             "training batches, on the device, with torchvision's ops and magnitudes: trivial (TrivialAugmentWide, 31 "
             "bins) | rand-mM-nN (RandAugment: N ops at bin M of 31, e.g. rand-m9-n2) | imagenet (AutoAugment's "
             "ImageNet policy) | \"\" = off; the pixels cross as uint8"),
      choice("data.augment_interpolation", PINFEED_FIELD(augment.interpolation),
             {{"nearest", augment::Interpolation::kNearest}, {"bilinear", augment::Interpolation::kBilinear}},
             "data.auto_augment's shears, translations and rotations: nearest (torchvision's default) | bilinear"),
      parsed("data.augment_fill", PINFEED_FIELD(augment.fill), augment::parse_fill, augment::fill_text,
             "data.auto_augment's geometric ops: the pixel value where the moved image leaves none, \"R,G,B\" or one "
             "value in [0, 255]; \"\" = zeros (torchvision's fill=None)"),
      key("data.random_erasing", PINFEED_FIELD(augment.erasing_p), in_range(0, 1),
          "torchvision's RandomErasing of the normalised training batch: the probability an image gets a box "
          "(2-33% of its area, aspect 0.3-3.3); 0 = off"),
      choice("data.random_erasing_value", PINFEED_FIELD(augment.erasing_value),
             {{"zero", augment::ErasingValue::kZero}, {"random", augment::ErasingValue::kRandom}},
             "what an erased box holds: zero (the mean colour) | random (standard normal values)"),
      key("data.mixup_alpha", PINFEED_FIELD(augment.mixup_alpha), in_range(0, augment::kMaxMixAlpha),
          "timm's Mixup (mode batch): the training batch blended with its mirror image by Beta(alpha, alpha), its "
          "labels soft targets with train.label_smoothing folded in; 0 = off"),
      key("data.cutmix_alpha", PINFEED_FIELD(augment.cutmix_alpha), in_range(0, augment::kMaxMixAlpha),
          "timm's CutMix (mode batch): a box of the mirror image pasted in, its area from Beta(alpha, alpha); 0 = off"),
      key("data.mixup_prob", PINFEED_FIELD(augment.mix_prob), in_range(0, 1),
          "with Mixup or CutMix on: the probability a batch is mixed at all (timm's prob)"),
      key("data.mixup_switch_prob", PINFEED_FIELD(augment.switch_prob), in_range(0, 1),
          "with both on: the probability a batch gets CutMix rather than Mixup (timm's switch_prob)"),
      choice("model.arch", PINFEED_FIELD(step.net.arch), arch_names(),
             "the network, torchvision's definition and parameter names: resnet18 | resnet34 (BasicBlock) | resnet50 "
             "| resnet101 | resnet152 | wide_resnet50_2 | wide_resnet101_2 | resnext50_32x4d | resnext101_32x8d "
             "(Bottleneck)"),
      key("model.num_classes", PINFEED_FIELD(model.num_classes), between(0, kMaxClasses),
          "classifier outputs; 0 = number of class folders (more outputs than folders: see model.allow_extra_classes)"),
      key("model.allow_extra_classes", PINFEED_FIELD(model.allow_extra_classes),
          "true: a model.num_classes above the number of class folders is meant (outputs no label uses, e.g. a head "
          "kept for more classes later); false refuses it in train and eval, a sign of a config written for other data"),
      key("model.zero_init_residual", PINFEED_FIELD(step.net.zero_init_residual),
          "zero-init each block's last BN (Goyal et al. 2017)"),
      key("model.blurpool", PINFEED_FIELD(step.net.blurpool),
          "FFCV's BlurPool: a fixed 3x3 binomial blur ([1 2 1] x [1 2 1] / 16, zero padding) before each strided "
          "convolution of >= 16 input channels (layer2-4's block-0 conv2 and downsample.0), in training and "
          "evaluation; no parameter or buffer, so the state dict is torchvision's either way; every step path "
          "(fused BN, bn_graph conv, channels_last, CUDA graph) runs it. pinfeed eval needs the value trained with"),
      choice("model.max_pool", PINFEED_FIELD(model.stem_max_pool),
             {{"auto", std::nullopt}, {"pinfeed", true}, {"aten", false}},
             "the stem's max pool in training: auto (pinfeed's on CUDA + channels_last, else ATen's) | pinfeed "
             "(its own kernels: one-byte argmax, gathering backward; the same values as ATen's) | aten"),
      choice("model.pad_input", PINFEED_FIELD(model.pad_input), kAutoOnOff,
             "the model's input made fp16 with a zero fourth channel on the GPU (the 7x7 stem convolution runs "
             "faster on 4 channels than on 3): auto (on for CUDA + channels_last + fp16 + uint8 pixels) | on | off"),
      choice("model.fold_grad_add", PINFEED_FIELD(model.fold_grad_add), kAutoOnOff,
             "in training, the two gradients at each block's input summed by conv1's data-gradient GEMM as it "
             "writes, not by a separate add: auto (on where model.fused_bn is) | on (needs train.channels_last) | off; "
             "a Bottleneck's route (its 1x1 conv1): resnet18/34 add as usual"),
      choice("model.bn_graph", PINFEED_FIELD(model.bn_graph),
             {{"auto", std::nullopt}, {"small", GraphBatchNorm::kSmall}, {"conv", GraphBatchNorm::kConv},
              {"all", GraphBatchNorm::kAll}, {"off", GraphBatchNorm::kNone}},
             "with model.fused_bn, which BatchNorms run through the cuDNN frontend's graph API (the build needs "
             "its headers): auto (conv in fp16, small otherwise: where each was measured faster) | small (BN + "
             "ReLU and BN + add + ReLU at 14x14 and smaller) | conv (small's, and each block's conv3 writing its "
             "BN's statistics, then one scale-bias-add-ReLU pass; fp16 only; a Bottleneck's route: resnet18/34 take "
             "small's there) | all | off"),
      choice("model.fused_bn", PINFEED_FIELD(model.fused_bn), kAutoOnOff,
             "BN, BN + ReLU and BN + add + ReLU as one cuDNN op each in training: auto (on for CUDA + "
             "channels_last + bf16/fp16) | on (on a CPU: off, with a warning) | off (ATen's separate ops)"),
      key("train.epochs", PINFEED_FIELD(schedule.epochs), between(1, kMaxEpochs), "epochs to train"),
      key("train.batch_size", PINFEED_FIELD(train_loader.batch_size), between(1, kMaxBatchSize),
          "samples per step (per rank)"),
      key("train.lr", PINFEED_FIELD(schedule.lr), in_range(0, 1e3), "peak learning rate (after warm-up)"),
      key("train.accumulate_steps", PINFEED_FIELD(step.accumulate_steps), between(1, 1024),
          "gradient accumulation: the optimizer steps once every this many batches, on the mean of their gradients "
          "(several ranks all-reduce once per step); the global batch is batch_size x ranks x this. An epoch "
          "ending mid-way steps on the batches taken; a stop waits for the step (at most this - 1 batches)"),
      key("train.lr_reference_batch", PINFEED_FIELD(schedule.reference_batch), between(0, kMaxBatchSize),
          "0: lr is the rate as given; B: lr and min_lr are per B samples, scaled linearly to the global batch "
          "(batch_size x ranks x accumulate_steps; Goyal et al. 2017)"),
      choice("train.optimizer", PINFEED_FIELD(step.optimizer.kind), engine::optimizer_names(),
             "sgd (momentum, weight decay) | lars (MLPerf's ResNet-50 LARS: SGD whose conv and fc weights step by "
             "their trust ratio, never BN's or biases) | lamb (timm.optim.Lamb: Adam's direction, weight decay, "
             "the trust ratio on decayed tensors, gradients clipped to a global norm)"),
      key("train.momentum", PINFEED_FIELD(step.optimizer.sgd.momentum), in_range(0, 1, /*hi_open=*/true),
          "SGD's and LARS's momentum"),
      key("train.nesterov", PINFEED_FIELD(step.optimizer.sgd.nesterov), "SGD's and LARS's Nesterov momentum"),
      key("train.weight_decay", PINFEED_FIELD(step.optimizer.sgd.weight_decay), in_range(0, 1),
          "weight decay: L2 in SGD and LARS (within LARS's trust ratio), LAMB's added to its update"),
      key("train.decay_bn_and_bias", PINFEED_FIELD(step.decay_bn_and_bias),
          "false: no weight decay on BN parameters and biases (nor, in LAMB, a trust ratio, as timm's groups)"),
      // eta 0: every trust ratio 0, no conv or fc weight ever moves.
      key("train.lars_eta", PINFEED_FIELD(step.optimizer.lars.eta), above_up_to(0, 1),
          "lars: trust coefficient of eta x ||w|| / (||g|| + weight_decay x ||w|| + lars_eps)"),
      key("train.lars_eps", PINFEED_FIELD(step.optimizer.lars.eps), in_range(0, 1),
          "lars: added to the trust ratio's denominator (NVIDIA's MLPerf runs: 0)"),
      key("train.lamb_beta1", PINFEED_FIELD(step.optimizer.lamb.beta1), in_range(0, 1, /*hi_open=*/true),
          "lamb: decay of the gradient's moving average"),
      key("train.lamb_beta2", PINFEED_FIELD(step.optimizer.lamb.beta2), in_range(0, 1, /*hi_open=*/true),
          "lamb: decay of the squared gradient's moving average"),
      // eps 0: 0 / 0 = NaN wherever a gradient and its moments are 0, from the first step.
      key("train.lamb_eps", PINFEED_FIELD(step.optimizer.lamb.eps), above_up_to(0, 1),
          "lamb: added to the root of the squared average"),
      key("train.lamb_max_grad_norm", PINFEED_FIELD(step.optimizer.lamb.max_grad_norm), in_range(0, 1e6),
          "lamb: gradients divided by max(1, global norm / this) first; 0 = no clipping"),
      key("train.lamb_trust_clip", PINFEED_FIELD(step.optimizer.lamb.trust_clip),
          "lamb: the trust ratio clamped to at most 1 (timm's trust_clip)"),
      key("train.lamb_decoupled_decay", PINFEED_FIELD(step.optimizer.lamb.decoupled_decay),
          "lamb: weights scaled by 1 - lr x weight_decay before the trust ratio, instead of the decay added to "
          "the update (timm's decoupled_decay)"),
      choice("train.lr_schedule", PINFEED_FIELD(schedule.shape),
             {{"cosine", engine::LrShape::kCosine}, {"triangular", engine::LrShape::kTriangular}, {"poly", engine::LrShape::kPoly}},
             "cosine (linear warm-up, then cosine to min_lr) | triangular (FFCV's cyclic: 1e-4 x lr at the start, "
             "linear up to lr at epoch warmup_epochs, linear down to min_lr at the end; each epoch interpolated by "
             "step) | poly (MLPerf's: linear warm-up, then min_lr + (lr - min_lr) x (1 - progress)^lr_poly_power)"),
      key("train.lr_poly_power", PINFEED_FIELD(schedule.poly_power), in_range(0, 100),
          "poly: the exponent of the decay (MLPerf's ResNet-50: 2)"),
      key("train.warmup_epochs", PINFEED_FIELD(schedule.warmup_epochs), in_range(0, 1e6),
          "linear LR warm-up length (fractions allowed), at most train.epochs; triangular: the epoch the rate peaks "
          "at, below train.epochs"),
      key("train.min_lr", PINFEED_FIELD(schedule.min_lr), in_range(0, 1e3), "LR at the end of the schedule, at most train.lr"),
      key("train.ema", PINFEED_FIELD(step.ema.enabled),
          "keep an exponential moving average of the weights and buffers (timm's ModelEmaV3), evaluated beside "
          "them each epoch and checkpointed as model_ema; best.pt takes the better of the two"),
      key("train.ema_decay", PINFEED_FIELD(step.ema.decay), in_range(0, 1, /*hi_open=*/true),
          "ema: ema = decay x ema + (1 - decay) x weights after each step (the first step's copies them)"),
      key("train.ema_warmup", PINFEED_FIELD(step.ema.warmup),
          "ema: the decay after step n is min(ema_decay, 1 - n^(-2/3)) (timm's use_warmup)"),
      key("train.label_smoothing", PINFEED_FIELD(step.label_smoothing), in_range(0, 1, /*hi_open=*/true),
          "cross-entropy label smoothing"),
      choice("train.precision", PINFEED_FIELD(step.precision), precision_names(),
             "fp32 | tf32 (TF32 matmul/conv) | bf16 (autocast) | fp16 (autocast with dynamic loss scaling); on a "
             "CPU every one steps in fp32 (bf16/fp16 with a warning)"),
      key("train.loss_scale_init", PINFEED_FIELD(step.loss_scaler.init_scale), in_range(1, 1e30),
          "fp16: first value of the dynamic loss scale (halved on each overflow)"),
      key("train.loss_scale_growth_interval", PINFEED_FIELD(step.loss_scaler.growth_interval),
          between(1, 1'000'000'000), "fp16: steps without overflow before the loss scale doubles"),
      switch_key("train.channels_last", PINFEED_FIELD(train.channels_last),
                 "NHWC memory format for the model and its input: auto (on CUDA) | true | false"),
      key("train.cudnn_benchmark", PINFEED_FIELD(train.cudnn_benchmark), "let cuDNN pick the fastest kernels"),
      switch_key("train.cuda_graph", PINFEED_FIELD(train.cuda_graph),
                 "capture the whole training step as a CUDA graph and replay it, with several ranks the gradient "
                 "all-reduce inside it: auto (on CUDA) | true (on a CPU eager, with a warning) | false"),
      key("train.seed", PINFEED_FIELD(train_loader.seed), at_least<int64_t>(0),
          "seed of init, shuffling and augmentation"),
      key("train.device", PINFEED_FIELD(train.device), check_device, "auto (CUDA if present) | cpu | cuda | cuda:N"),
      key("train.max_steps_per_epoch", PINFEED_FIELD(train.max_steps_per_epoch), at_least<int64_t>(0),
          "cap on steps per epoch; 0 = whole epoch"),
      key("train.eval", PINFEED_FIELD(train.eval), "evaluate on the val split after each epoch"),
      key("train.eval_flip", PINFEED_FIELD(step.eval_flip),
          "evaluation's logits the mean of the image's and its horizontal mirror's (FFCV's lr_tta), after each "
          "epoch and in pinfeed eval: two forward passes per batch"),
      parsed("train.init_from", PINFEED_FIELD(train.init_from), path_of, as_written,
             "a new run starts from the weights of this pinfeed checkpoint or torch.save(model.state_dict()) file "
             "(not its optimizer or epoch); another number of classes re-initialises fc; ~/ expands; \"\" = none"),
      choice("pipeline.mode", PINFEED_FIELD(pipeline.mode), mode_names(),
             "preset: auto (dual_stream on CUDA, pageable on the CPU; the three flags below as set where any is "
             "set) | " + pipeline::preset_names() + "; a preset sets the three flags below"),
      key("pipeline.pin_memory", PINFEED_FIELD(pipeline.pin_memory), "workers write batches into page-locked buffers"),
      key("pipeline.non_blocking", PINFEED_FIELD(pipeline.non_blocking), "asynchronous host-to-device copies"),
      key("pipeline.dual_stream", PINFEED_FIELD(pipeline.dual_stream),
          "a copier thread copies the next batches on a stream of their own during compute"),
      choice("pipeline.transfer_dtype", PINFEED_FIELD(pipeline.transfer_dtype),
             {{"float32", pipeline::TransferDtype::kFloat32}, {"uint8", pipeline::TransferDtype::kUint8}},
             "float32 (normalised on host) | uint8 (normalised on GPU, 4x fewer bytes)"),
      key("pipeline.pinned_budget_mb", PINFEED_FIELD(pipeline.pinned_budget_mb), between(0, kMaxMegabytes),
          "cap on page-locked MB; 0 = 30% of RAM"),
      key("pipeline.max_steps_ahead", PINFEED_FIELD(loop.max_steps_ahead), between(0, kMaxPrefetchBatches),
          "the host queues at most this many steps ahead of the GPU, then waits (ahead_ms, not wait_ms); 0 = no "
          "limit; 1 serialises host and GPU"),
      key("pipeline.warmup_steps", PINFEED_FIELD(loop.warmup_steps), between(0, 1'000'000),
          "steps per epoch left out of the timing figures"),
      choice("dist.backend", PINFEED_FIELD(dist.backend), backend_names(),
             "several ranks: auto (nccl on CUDA, gloo on the CPU) | nccl | gloo"),
      key("dist.bucket_mb", PINFEED_FIELD(step.bucket_mb), in_range(0.001, 4096),
          "several ranks: gradients all-reduced per bucket, MB (DDP's bucket_cap_mb)"),
      key("dist.overlap", PINFEED_FIELD(step.overlap),
          "several ranks: all-reduce each bucket during backward; false: after backward"),
      key("dist.timeout_s", PINFEED_FIELD(dist.timeout_s), between(1, kMaxTimeoutS),
          "several ranks: bound on joining the group and on every collective, s"),
      key("dist.one_rank_group", PINFEED_FIELD(dist.one_rank_group),
          "one rank: form a group of it anyway (the backend's 1-rank communicator) and all-reduce the gradients "
          "through it, as with several ranks: the multi-rank step tried and timed on one device"),
      key("run.name", PINFEED_FIELD(run.name), check_run_name,
          "run directory is <dir>/<timestamp>-<name>; a plain folder name (no '/', no '..')"),
      key("run.dir", PINFEED_FIELD(run.dir), check_path, "where run directories go"),
      key("run.log_steps", PINFEED_FIELD(run.log_steps), "write per-step figures to steps.jsonl"),
      parsed("run.trace_steps", PINFEED_FIELD(run.trace_steps), parse_step_range, range_text,
             "\"A-B\": a Kineto trace of global steps A to B (from 0, within one epoch) into "
             "trace_steps_A-B.json, for Perfetto; \"\" = off"),
      key("run.checkpoint_every", PINFEED_FIELD(run.checkpoint_every), between(1, 1'000'000),
          "epochs between checkpoints"),
      key("run.progress_interval_s", PINFEED_FIELD(run.progress_interval_s), in_range(0.1, 1e6),
          "seconds between progress lines when not on a terminal"),
  };
  return table;
}

const std::map<std::string, std::string>& renamed_keys() {
  static const std::map<std::string, std::string> renamed = {
      {"data.gpu_decode_share", "data.nvjpeg_share"},
      {"pipeline.prefetch", "pipeline.dual_stream"},
  };
  return renamed;
}

const Key* find_key(const std::string& name) {
  for (const auto& k : keys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::optional<engine::StepRange> parse_step_range(const std::string& text) {
  if (text.empty()) return std::nullopt;
  // Digits only (no sign, no spaces), at most 12 each: far past any run's steps, far from overflow.
  static const std::regex re("([0-9]{1,12})(-([0-9]{1,12}))?");
  std::smatch m;
  const std::string expected = "must be \"A-B\" (steps A to B, 0 <= A <= B) or \"A\", got \"" + printable(text) + "\"";
  if (!std::regex_match(text, m, re)) throw std::invalid_argument(expected);
  engine::StepRange r;
  r.first = std::stoll(m[1].str());
  r.last = m[3].matched ? std::stoll(m[3].str()) : r.first;
  if (r.last < r.first) throw std::invalid_argument(expected);
  if (r.size() > kMaxTraceSteps) {
    throw std::invalid_argument("must span at most " + std::to_string(kMaxTraceSteps) + " steps (a megabyte or two of trace each), got \"" +
                                printable(text) + "\" (" + std::to_string(r.size()) + " steps)");
  }
  return r;
}

std::string expand_user(const std::string& path) {
  if (path.rfind("~/", 0) == 0) {
    if (const char* home = std::getenv("HOME")) return std::string(home) + path.substr(1);
  }
  return path;
}

}  // namespace pinfeed::app

#!/usr/bin/env python3
"""Trains torchvision's ResNet-50 with the recipe of a pinfeed config, for the accuracy comparison.

    reference_train.py --config configs/parity_resnet50.toml [section.key=value ...] --out metrics.jsonl

It reads the same TOML file and the same `section.key=value` overrides as `pinfeed train`, so that both sides
train one recipe by construction, and it follows pinfeed's semantics wherever two trainers could differ:

- model: torchvision.models.resnet50(num_classes, zero_init_residual = model.zero_init_residual); pinfeed's
  initialisation is torchvision's (kaiming-normal fan-out convolutions, BN 1/0, default Linear head).
- data: torchvision ImageFolder (classes sorted by name); train RandomResizedCrop(image_size, scale =
  (data.scale_min, data.scale_max), ratio = (3/4, 4/3)) + RandomHorizontalFlip (data.hflip); val
  Resize(floor(S / data.val_resize_ratio)) + CenterCrop(S), S = data.val_image_size or image_size (a resolution
  schedule is refused). pipeline.transfer_dtype =
  "float32": ToTensor + Normalize in the workers; "uint8": PILToTensor, uint8 to the GPU, normalised there
  (as pinfeed's uint8 transfer; the same values up to float rounding). DataLoader(shuffle, drop_last=True,
  pin_memory on CUDA, persistent workers); val every sample once (no drop_last), after every epoch (train.eval).
- optimiser: SGD(momentum, nesterov, dampening 0; fused on CUDA, as pinfeed's at::_fused_sgd_), weight decay on
  every parameter of dimension > 1 only when train.decay_bn_and_bias = false (pinfeed: BN weights and biases and
  every bias, i.e. the parameters of dimension <= 1).
- learning rate, set before every step from the global step (app/optim/lr_schedule.cpp): warm-up lr * (s + 1) / W for
  s < W = warmup_epochs * steps_per_epoch, then min_lr + (lr - min_lr) (1 + cos(pi p)) / 2 with p = (s - W) /
  (E * steps_per_epoch - W); train.lr_schedule = "triangular": FFCV's cyclic, "poly": MLPerf's (learning_rate
  below); lr and min_lr scaled by batch / train.lr_reference_batch when that is set. train.optimizer other than
  "sgd" and train.ema are refused.
- loss: cross-entropy with train.label_smoothing under bf16 or fp16 autocast (train.precision), fp16 with
  torch.amp.GradScaler(init_scale = train.loss_scale_init, growth_interval = train.loss_scale_growth_interval,
  GradScaler's factors 2 and 0.5, as pinfeed's loss scaler), channels_last
  model and input (train.channels_last), TF32 allowed unless precision is "fp32", cudnn.benchmark as
  train.cudnn_benchmark.
- metrics (the fields of pinfeed's metrics.jsonl, so that scripts/plot_parity.py reads both alike): epoch (from
  1), lr (the epoch's last step's), train_loss (mean of the steps' losses, smoothing included), val_loss (mean
  cross-entropy without smoothing, logits in float32), val_top1, val_top5 (fractions of the whole val split),
  samples_per_s (training steps after the first min(10, steps / 4), synchronised), epoch_s, steps.

Keys of the config that concern pinfeed's own machinery (pipeline.*, dist.*, run.*, data.crop_decode,
data.decoder, data.nvjpeg_share: the reference always decodes with PIL in its workers, model.fused_bn, model.bn_graph,
model.max_pool, model.pad_input and model.fold_grad_add: the same arithmetic through other kernels, ...) are accepted and ignored; an unknown key, or a recipe key this script cannot follow, stops it with exit code 2.
DataLoader workers: data.workers, or as pinfeed when 0 (cores - 3, cores - 1 on 4 cores or fewer); --workers
overrides it.
"""
import argparse
import json
import math
import os
import random
import sys
import time

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

# Every config key pinfeed knows, with its default (README's table): the recipe's keys are read, the rest are
# pinfeed's machinery and ignored here.
DEFAULTS = {
    "data": {"root": "", "train_split": "train", "val_split": "val", "image_size": 224, "val_image_size": 0,
             "val_resize_ratio": 0.875, "image_size_min": 0, "image_size_max": 0, "ramp_start": 0, "ramp_end": 0,
             "ramp_step": 32, "image_size_by_epoch": "", "scale_min": 0.08, "scale_max": 1.0, "hflip": True, "crop_decode": True, "decoder": "auto", "workers": 0,
             "prefetch_batches": 4, "on_bad_image": "skip", "max_image_pixels": 100000000, "max_file_mb": 256, "sample_timeout_s": 300.0, "nvjpeg_share": 1.0,
             "auto_augment": "", "augment_interpolation": "nearest", "augment_fill": "", "random_erasing": 0.0,
             "random_erasing_value": "zero", "mixup_alpha": 0.0, "cutmix_alpha": 0.0, "mixup_prob": 1.0,
             "mixup_switch_prob": 0.5},
    "model": {"arch": "resnet50", "num_classes": 0, "zero_init_residual": True, "fused_bn": "auto", "bn_graph": "auto", "max_pool": "auto",
              "pad_input": "auto", "fold_grad_add": "auto"},
    "train": {"epochs": 90, "batch_size": 256, "lr": 0.1, "lr_reference_batch": 0, "momentum": 0.9, "lr_schedule": "cosine",
              "nesterov": False, "weight_decay": 1e-4, "decay_bn_and_bias": True, "warmup_epochs": 0.0,
              "min_lr": 0.0, "label_smoothing": 0.0, "precision": "tf32", "loss_scale_init": 65536.0,
              "loss_scale_growth_interval": 2000, "channels_last": "auto",
              "cudnn_benchmark": True, "cuda_graph": "auto", "seed": 0, "device": "auto",
              "max_steps_per_epoch": 0, "eval": True, "init_from": "", "optimizer": "sgd", "lars_eta": 0.001,
              "lars_eps": 0.0, "lamb_beta1": 0.9, "lamb_beta2": 0.999, "lamb_eps": 1e-6, "lamb_max_grad_norm": 1.0,
              "lamb_trust_clip": False, "lamb_decoupled_decay": False, "lr_poly_power": 2.0, "ema": False,
              "ema_decay": 0.9998, "ema_warmup": False},
    "pipeline": {"mode": "auto", "pin_memory": False, "non_blocking": False, "dual_stream": False,
                 "transfer_dtype": "float32", "pinned_budget_mb": 0, "max_steps_ahead": 2, "warmup_steps": 10},
    "dist": {"backend": "auto", "bucket_mb": 25.0, "overlap": True, "timeout_s": 300},
    "run": {"name": "run", "dir": "runs", "log_steps": False, "trace_steps": "", "checkpoint_every": 1,
            "progress_interval_s": 10.0},
}
# Keys that take true, false or "auto".
SWITCHES = {"train.channels_last", "train.cuda_graph"}
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
EXIT_USAGE = 2


class UsageError(Exception):
    pass


def parse_value(text):
    """TOML value syntax, as pinfeed's overrides; a bare word is a string."""
    try:
        return tomllib.loads("v = " + text)["v"]
    except tomllib.TOMLDecodeError:
        return text


def set_key(cfg, dotted, value, where, raw=None):
    section, _, key = dotted.partition(".")
    if section not in DEFAULTS or key not in DEFAULTS[section]:
        raise UsageError(f"{where}: unknown config key '{dotted}' (pinfeed help config lists them)")
    default = DEFAULTS[section][key]
    if dotted in SWITCHES:
        if raw is not None and not isinstance(value, bool):
            value = raw
        ok = isinstance(value, bool) or value == "auto"
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:  # a string key: an override's bare word that TOML reads as another type is the string as written
        if not isinstance(value, str) and raw is not None:
            value = raw
        ok = isinstance(value, str)
    if not ok:
        raise UsageError(f"{where}: {dotted} must be a {type(default).__name__}, got {value!r}")
    cfg[section][key] = value


def load_config(path, overrides):
    if tomllib is None:
        raise UsageError("reading the config needs Python 3.11 or newer (tomllib)")
    cfg = {s: dict(keys) for s, keys in DEFAULTS.items()}
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    for section, keys in doc.items():
        if not isinstance(keys, dict):
            raise UsageError(f"{path}: '{section}' is not a [section]")
        for key, value in keys.items():
            set_key(cfg, f"{section}.{key}", value, path)
    for o in overrides:
        dotted, eq, text = o.partition("=")
        if not eq:
            raise UsageError(f"override '{o}': expected section.key=value")
        set_key(cfg, dotted.strip(), parse_value(text.strip()), f"override '{o}'", raw=text.strip())
    t, d, m = cfg["train"], cfg["data"], cfg["model"]
    if m["arch"] != "resnet50":
        raise UsageError(f"model.arch = {m['arch']!r}: only resnet50")
    if t["lr_schedule"] not in ("cosine", "triangular", "poly"):
        raise UsageError(f"train.lr_schedule must be cosine | triangular | poly, got {t['lr_schedule']!r}")
    if t["optimizer"] != "sgd" or t["ema"]:
        raise UsageError("train.optimizer = \"lars\" or \"lamb\", and train.ema, are pinfeed's alone: this reference "
                         "trains with SGD and evaluates the weights themselves")
    if d["auto_augment"] or d["random_erasing"] > 0 or d["mixup_alpha"] > 0 or d["cutmix_alpha"] > 0:
        raise UsageError("data.auto_augment, data.random_erasing and Mixup/CutMix are not followed by this reference: "
                         "it trains with random-resized crop and flip")
    if t["precision"] not in ("fp32", "tf32", "bf16", "fp16"):
        raise UsageError(f"train.precision must be fp32 | tf32 | bf16 | fp16, got {t['precision']!r}")
    if cfg["pipeline"]["transfer_dtype"] not in ("float32", "uint8"):
        raise UsageError(f"pipeline.transfer_dtype must be float32 | uint8, got {cfg['pipeline']['transfer_dtype']!r}")
    if not d["root"]:
        raise UsageError("data.root is empty")
    if t["epochs"] < 1 or t["batch_size"] < 1 or d["image_size"] < 1:
        raise UsageError("train.epochs, train.batch_size and data.image_size must be >= 1")
    if d["image_size_min"] or d["image_size_max"] or d["image_size_by_epoch"]:
        raise UsageError("a resolution schedule (data.image_size_min/max, data.image_size_by_epoch) is pinfeed's "
                         "alone: this reference trains at data.image_size")
    return cfg


def learning_rate(t, step, steps_per_epoch, scale):
    """app/optim/lr_schedule.cpp, line for line."""
    lr, min_lr = t["lr"] * scale, t["min_lr"] * scale
    if t["lr_schedule"] == "triangular":
        def at_epoch(e):
            peak, end = t["warmup_epochs"], float(t["epochs"])
            if e >= end:
                return min_lr
            if e < peak:
                return 1e-4 * lr + (lr - 1e-4 * lr) * max(0.0, e) / peak
            return lr + (min_lr - lr) * (e - peak) / (end - peak)
        epoch, at = divmod(step, steps_per_epoch)
        a, b = at_epoch(float(epoch)), at_epoch(float(epoch + 1))
        return a + (b - a) * at / steps_per_epoch
    warmup = t["warmup_epochs"] * steps_per_epoch
    total = float(t["epochs"]) * steps_per_epoch
    if t["lr_schedule"] == "poly":
        it = float(step + 1)
        if it <= warmup:
            return lr * it / warmup
        progress = min(1.0, (it - warmup) / (total - warmup)) if total > warmup else 1.0
        return min_lr + (lr - min_lr) * (1 - progress) ** t["lr_poly_power"]
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / (total - warmup) if total > warmup else 1.0
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def default_workers():
    """pinfeed's data::default_workers for one process."""
    cores = os.cpu_count() or 1
    return cores - 3 if cores > 4 else max(1, cores - 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-c", required=True, help="pinfeed TOML config (the recipe)")
    p.add_argument("overrides", nargs="*", help="section.key=value, as `pinfeed train` takes them")
    p.add_argument("--out", required=True, help="JSON lines file, one line per epoch (pinfeed's metrics.jsonl fields)")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: data.workers, 0 = as pinfeed)")
    p.add_argument("--prefetch-factor", type=int, default=4)
    args = p.parse_intermixed_args()  # overrides before, between or after the options
    try:
        cfg = load_config(args.config, args.overrides)
    except (UsageError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except tomllib.TOMLDecodeError as e:
        print(f"error: {args.config}: {e}", file=sys.stderr)
        return EXIT_USAGE
    return train(cfg, args)


class GpuNormalize:
    """uint8 (B, 3, H, W) on the device -> float (x / 255 - mean) / std in the model's memory format."""

    def __init__(self, torch, device, fmt):
        self.mean = torch.tensor([255 * m for m in MEAN], device=device).view(1, 3, 1, 1)
        self.inv_std = torch.tensor([1 / (255 * s) for s in STD], device=device).view(1, 3, 1, 1)
        self.fmt = fmt

    def __call__(self, x):
        return x.contiguous(memory_format=self.fmt).float().sub_(self.mean).mul_(self.inv_std)


def train(cfg, args):
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision import transforms

    d, t, m = cfg["data"], cfg["train"], cfg["model"]
    uint8 = cfg["pipeline"]["transfer_dtype"] == "uint8"
    dev = t["device"]
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if dev == "auto" else dev)
    if device.type == "cuda" and device.index is None:  # "cuda" means the current device, as in pinfeed
        device = torch.device("cuda", torch.cuda.current_device())
    cuda = device.type == "cuda"
    if not cuda and t["precision"] in ("bf16", "fp16"):
        print(f'error: train.precision = "{t["precision"]}" needs a CUDA device (device is cpu), as in pinfeed',
              file=sys.stderr)
        return EXIT_USAGE
    if cuda:
        torch.cuda.set_device(device)
    seed = t["seed"]
    random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = t["cudnn_benchmark"]
    tf32 = t["precision"] != "fp32"  # pinfeed allows TF32 with bf16 too (the fp32 matmuls autocast leaves)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32

    size = d["image_size"]
    to_tensor = [transforms.PILToTensor()] if uint8 else [transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    train_tf = transforms.Compose(
        [transforms.RandomResizedCrop(size, scale=(d["scale_min"], d["scale_max"]), ratio=(3 / 4, 4 / 3))]
        + ([transforms.RandomHorizontalFlip()] if d["hflip"] else []) + to_tensor)
    val_size = d["val_image_size"] or size
    val_tf = transforms.Compose([transforms.Resize(math.floor(val_size / d["val_resize_ratio"])),
                                 transforms.CenterCrop(val_size)] + to_tensor)
    root = os.path.expanduser(d["root"])
    train_set = torchvision.datasets.ImageFolder(os.path.join(root, d["train_split"]), train_tf)
    val_set = None
    if t["eval"]:
        val_set = torchvision.datasets.ImageFolder(os.path.join(root, d["val_split"]), val_tf)
        if val_set.classes != train_set.classes:
            print("error: the val split's class folders differ from the train split's", file=sys.stderr)
            return 3
    num_classes = m["num_classes"] or len(train_set.classes)
    workers = args.workers if args.workers is not None else (d["workers"] or default_workers())
    loader_kw = dict(batch_size=t["batch_size"], num_workers=workers, pin_memory=cuda,
                     persistent_workers=workers > 0, prefetch_factor=args.prefetch_factor if workers > 0 else None)
    train_loader = DataLoader(train_set, shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(seed), **loader_kw)
    val_loader = DataLoader(val_set, shuffle=False, drop_last=False, **loader_kw) if val_set else None
    steps_per_epoch = len(train_loader)
    if t["max_steps_per_epoch"] > 0:
        steps_per_epoch = min(steps_per_epoch, t["max_steps_per_epoch"])
    if steps_per_epoch == 0:
        print(f"error: {len(train_set)} training images make no batch of {t['batch_size']}", file=sys.stderr)
        return 3
    scale = t["batch_size"] / t["lr_reference_batch"] if t["lr_reference_batch"] > 0 else 1.0

    channels_last = t["channels_last"] if t["channels_last"] != "auto" else device.type == "cuda"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = torchvision.models.resnet50(num_classes=num_classes, zero_init_residual=m["zero_init_residual"])
    model = model.to(device, memory_format=fmt)
    decay, no_decay = [], []
    for param in model.parameters():
        (no_decay if not t["decay_bn_and_bias"] and param.dim() <= 1 else decay).append(param)
    groups = [{"params": decay, "weight_decay": t["weight_decay"]}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.SGD(groups, lr=learning_rate(t, 0, steps_per_epoch, scale), momentum=t["momentum"],
                          nesterov=t["nesterov"], fused=cuda)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=t["label_smoothing"])
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(t["precision"])
    scaler = torch.amp.GradScaler("cuda", init_scale=t["loss_scale_init"],
                                  growth_interval=t["loss_scale_growth_interval"], enabled=t["precision"] == "fp16")
    prepare = GpuNormalize(torch, device, fmt) if uint8 else (lambda x: x.contiguous(memory_format=fmt))
    timing_warmup = min(cfg["pipeline"]["warmup_steps"], steps_per_epoch // 4)

    print(f"reference: {len(train_set)} train images, {num_classes} classes, device {device}, {workers} workers, "
          f"{steps_per_epoch} steps/epoch, precision {t['precision']}, channels_last {channels_last}, "
          f"transfer {cfg['pipeline']['transfer_dtype']}, peak lr {t['lr'] * scale:g}, seed {seed}, "
          f"torch {torch.__version__}, torchvision {torchvision.__version__}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    out = open(args.out, "w")
    global_step = 0
    for epoch in range(t["epochs"]):
        t_epoch = time.perf_counter()
        model.train()
        loss_sum = torch.zeros((), device=device)
        lr = 0.0
        t0, timed_samples = t_epoch, 0
        for step, (x, y) in enumerate(train_loader):
            if step == steps_per_epoch:
                break
            if step == timing_warmup:
                if cuda:
                    torch.cuda.synchronize(device)
                t0, timed_samples = time.perf_counter(), 0
            x = prepare(x.to(device, non_blocking=True))
            y = y.to(device, non_blocking=True)
            lr = learning_rate(t, global_step, steps_per_epoch, scale)
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = criterion(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.detach().float()
            global_step += 1
            timed_samples += y.shape[0]
        if cuda:
            torch.cuda.synchronize(device)
        samples_per_s = timed_samples / (time.perf_counter() - t0)
        row = {"epoch": epoch + 1, "lr": lr, "train_loss": loss_sum.item() / steps_per_epoch,
               "val_loss": None, "val_top1": None, "val_top5": None}
        if val_loader is not None:
            row.update(evaluate(torch, model, val_loader, device, prepare, autocast_dtype))
        row.update({"samples_per_s": samples_per_s, "epoch_s": time.perf_counter() - t_epoch,
                    "steps": steps_per_epoch, "warmup_steps": timing_warmup, "implementation": "torchvision",
                    "seed": seed})
        out.write(json.dumps(row) + "\n")
        out.flush()
        top = "n/a" if row["val_top1"] is None else f"{row['val_top1']:.4f} top5 {row['val_top5']:.4f}"
        print(f"epoch {epoch + 1}/{t['epochs']}: train_loss {row['train_loss']:.4f} top1 {top} | "
              f"{samples_per_s:.0f} samples/s, {row['epoch_s']:.1f} s", flush=True)
    out.close()
    return 0


def evaluate(torch, model, loader, device, prepare, autocast_dtype):
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top-1 hits, top-5 hits, samples
    with torch.no_grad():
        for x, y in loader:
            x = prepare(x.to(device, non_blocking=True))
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                logits = model(x)
            logits = logits.float()
            k = min(5, logits.shape[1])
            hits = logits.topk(k, 1).indices.eq(y.unsqueeze(1))
            sums[0] += torch.nn.functional.cross_entropy(logits, y, reduction="sum")
            sums[1] += hits[:, :1].sum()
            sums[2] += hits.sum()
            sums[3] += y.shape[0]
    model.train()
    loss, top1, top5, n = sums.tolist()
    return {"val_loss": loss / n, "val_top1": top1 / n, "val_top5": top5 / n} if n else {}


if __name__ == "__main__":
    sys.exit(main())

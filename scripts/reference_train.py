#!/usr/bin/env python3
"""Trains torchvision's ResNet-50 with the recipe of a pinfeed config: the accuracy comparison and time to accuracy.

    reference_train.py --config configs/parity_resnet50.toml [section.key=value ...] --out metrics.jsonl
                       [--compile] [--loader dataloader|dali]

It reads the same TOML file and the same `section.key=value` overrides as `pinfeed train` (scripts/
reference_config.py), so that both sides train one recipe by construction, and it follows pinfeed's semantics
wherever two trainers could differ:

- model: torchvision.models.resnet50(num_classes, zero_init_residual = model.zero_init_residual); pinfeed's
  initialisation is torchvision's (kaiming-normal fan-out convolutions, BN 1/0, default Linear head).
  model.blurpool: FFCV's BlurPoolConv2d around each Conv2d of stride > 1 and >= 16 input channels (as
  ffcv-imagenet's train_imagenet.py); train.eval_flip: validation logits the mean of the image's and its
  horizontal flip's (FFCV's lr_tta, halved).
  --compile: torch.compile(model, dynamic=False), default mode (--compile-mode), as reference_pytorch.py and timm's
  train.py --torchcompile: static graphs, one per training side (and one per val batch shape, in eval mode), the
  forward and backward compiled, loss and SGD step eager; the compile time falls in the epochs' wall clock.
- data (scripts/reference_data.py): DataLoader workers (default) or --loader dali; the training side of each epoch
  is pinfeed's (data.image_size, or the ramp data.image_size_min/max, ramp_start/end/step, or
  data.image_size_by_epoch: reference_config.side_of_epoch, SideSchedule::at line for line); val at
  data.val_image_size (or data.image_size) from a floor(S / data.val_resize_ratio) resize; drop_last in training,
  every val sample once, after every epoch (train.eval).
- augmentation: data.auto_augment as torchvision's TrivialAugmentWide / RandAugment / AutoAugment in the workers;
  data.random_erasing as torchvision's RandomErasing((0.02, 0.33), (0.3, 3.3), value 0 or "random") of each
  normalised training image on the device; Mixup/CutMix as timm.data.Mixup (mode batch, prob, switch_prob,
  train.label_smoothing folded into its soft targets) on the device.
- optimiser: SGD(momentum, nesterov, dampening 0; fused on CUDA, as pinfeed's at::_fused_sgd_), weight decay on
  every parameter of dimension > 1 only when train.decay_bn_and_bias = false (pinfeed: BN weights and biases and
  every bias, i.e. the parameters of dimension <= 1); train.optimizer other than "sgd" is refused. train.ema:
  timm.utils.ModelEmaV3(decay, use_warmup = train.ema_warmup) updated after each step with the step count from 1
  (as timm's train.py; tests/check_optim_reference.py pins pinfeed's EMA to it), evaluated beside the weights.
- learning rate, set before every step from the global step (engine/optim/lr_schedule.cpp): warm-up lr * (s + 1) / W for
  s < W = warmup_epochs * steps_per_epoch, then min_lr + (lr - min_lr) (1 + cos(pi p)) / 2 with p = (s - W) /
  (E * steps_per_epoch - W); train.lr_schedule = "triangular": FFCV's cyclic, "poly": MLPerf's; lr and min_lr
  scaled by batch / train.lr_reference_batch when that is set.
- loss: cross-entropy with train.label_smoothing under bf16 or fp16 autocast (train.precision), fp16 with
  torch.amp.GradScaler(init_scale = train.loss_scale_init, growth_interval = train.loss_scale_growth_interval,
  GradScaler's factors 2 and 0.5, as pinfeed's loss scaler), channels_last
  model and input (train.channels_last), TF32 allowed unless precision is "fp32", cudnn.benchmark as
  train.cudnn_benchmark.
- metrics (the fields of pinfeed's metrics.jsonl, so that `scripts/tables.py parity` and `tables.py tta` read
  both alike): epoch (from 1), lr (the epoch's last step's), image_size (the epoch's training side), train_loss
  (mean of the steps' losses, smoothing included), val_loss (mean cross-entropy without smoothing, logits in
  float32), val_top1, val_top5 (fractions of the whole val split), ema_val_loss/top1/top5 with train.ema,
  samples_per_s (training steps after the first min(10, steps / 4), synchronised), epoch_s (training and
  evaluation), eval_s, steps; and wall_s: seconds from the script's start (before torch is imported) to the end of
  the epoch's evaluation, start-up, data scans, worker starts and compilation included.

Every key and its default are pinfeed's own, asked of the executable (`pinfeed help config --json`: $PINFEED_BIN,
else $PINFEED_EXE, else build/app/pinfeed; exit 2 when none runs). Keys of the config that concern pinfeed's own
machinery (pipeline.*, dist.*, run.*, data.crop_decode, data.decoder, data.nvjpeg_share: the reference decodes
with PIL in its workers or with DALI, model.fused_bn, model.bn_graph, model.max_pool, model.pad_input and
model.fold_grad_add: the same arithmetic through other kernels, ...) are accepted and ignored; an unknown key, or a
recipe key this script cannot follow, stops it with exit code 2. Workers (DataLoader processes, DALI threads):
data.workers, or as pinfeed when 0 (cores - 3, cores - 1 on 4 cores or fewer); --workers overrides it.
"""
import time

LAUNCH = time.perf_counter()  # wall_s counts from here: before anything heavy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402

from reference_config import (EXIT_USAGE, UsageError, add_compile_mode, default_workers,  # noqa: E402,F401
                              learning_rate, load_config, side_of_epoch, sides_by_epoch, tomllib)
from reference_data import LOADERS  # noqa: E402  (torch is imported by train(), not here)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-c", required=True, help="pinfeed TOML config (the recipe)")
    p.add_argument("overrides", nargs="*", help="section.key=value, as `pinfeed train` takes them")
    p.add_argument("--out", required=True, help="JSON lines file, one line per epoch (pinfeed's metrics.jsonl fields)")
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader workers or DALI threads (default: data.workers, 0 = as pinfeed)")
    p.add_argument("--prefetch-factor", type=int, default=4, help="DataLoader batches ahead per worker")
    p.add_argument("--compile", action="store_true", help="torch.compile(model), static shapes")
    add_compile_mode(p)
    p.add_argument("--loader", choices=sorted(LOADERS), default="dataloader",
                   help="torchvision DataLoader workers, or NVIDIA DALI (imported only then)")
    p.add_argument("--dali-hw-load", type=float, default=None,
                   help="--loader dali on CUDA: hw_decoder_load (default: DALI's)")
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


def device_augmentations(torch, cfg, num_classes):
    """What the training batch gets on the device, after normalisation: (x, y) -> (x, target) and the loss."""
    d, t = cfg["data"], cfg["train"]
    erase = None
    if d["random_erasing"] > 0:
        from torchvision.transforms import RandomErasing
        erase = RandomErasing(p=d["random_erasing"], scale=(0.02, 0.33), ratio=(0.3, 3.3),
                              value="random" if d["random_erasing_value"] == "random" else 0, inplace=True)
    mixup = None
    if d["mixup_alpha"] > 0 or d["cutmix_alpha"] > 0:
        from timm.data import Mixup
        mixup = Mixup(mixup_alpha=d["mixup_alpha"], cutmix_alpha=d["cutmix_alpha"], prob=d["mixup_prob"],
                      switch_prob=d["mixup_switch_prob"], mode="batch", label_smoothing=t["label_smoothing"],
                      num_classes=num_classes)
    # Mixup's soft targets hold the smoothing already.
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.0 if mixup else t["label_smoothing"])

    def augment(x, y):
        if erase is not None:
            for image in x:  # each image its own draw, in place (a view of the batch)
                erase(image)
        return mixup(x, y) if mixup is not None else (x, y)
    return augment, criterion


def train(cfg, args):
    import numpy as np
    import torch
    import torchvision

    d, t, m = cfg["data"], cfg["train"], cfg["model"]
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
    np.random.seed(seed)  # timm's Mixup draws from NumPy's global generator
    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = t["cudnn_benchmark"]
    tf32 = t["precision"] != "fp32"  # pinfeed allows TF32 with bf16 too (the fp32 matmuls autocast leaves)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32

    channels_last = t["channels_last"] if t["channels_last"] != "auto" else device.type == "cuda"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    workers = args.workers if args.workers is not None else (d["workers"] or default_workers())
    try:
        data = LOADERS[args.loader](torch, cfg, args, device, fmt, workers)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    num_classes = m["num_classes"] or len(data.classes)
    if t["eval"] and data.val_classes != data.classes:
        print("error: the val split's class folders differ from the train split's", file=sys.stderr)
        return 3
    steps_per_epoch = data.steps_per_epoch
    if t["max_steps_per_epoch"] > 0:
        steps_per_epoch = min(steps_per_epoch, t["max_steps_per_epoch"])
    if steps_per_epoch == 0:
        print(f"error: {data.train_size} training images make no batch of {t['batch_size']}", file=sys.stderr)
        return 3
    scale = t["batch_size"] / t["lr_reference_batch"] if t["lr_reference_batch"] > 0 else 1.0

    model = torchvision.models.resnet50(num_classes=num_classes, zero_init_residual=m["zero_init_residual"])
    if m["blurpool"]:
        apply_blurpool(torch, model)
    model = model.to(device, memory_format=fmt)
    net = model
    sides = sorted(set(sides_by_epoch(cfg)))
    if args.compile:
        # One static graph per training side, plus the val batch shapes in eval mode, within Dynamo's limit.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * len(sides) + 4)
        net = torch.compile(model, dynamic=False, mode=args.compile_mode)
    ema = None
    if t["ema"]:
        from timm.utils import ModelEmaV3
        ema = ModelEmaV3(model, decay=t["ema_decay"], use_warmup=t["ema_warmup"])
    decay, no_decay = [], []
    for param in model.parameters():
        (no_decay if not t["decay_bn_and_bias"] and param.dim() <= 1 else decay).append(param)
    groups = [{"params": decay, "weight_decay": t["weight_decay"]}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.SGD(groups, lr=learning_rate(t, 0, steps_per_epoch, scale), momentum=t["momentum"],
                          nesterov=t["nesterov"], fused=cuda)
    augment, criterion = device_augmentations(torch, cfg, num_classes)
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(t["precision"])
    scaler = torch.amp.GradScaler("cuda", init_scale=t["loss_scale_init"],
                                  growth_interval=t["loss_scale_growth_interval"], enabled=t["precision"] == "fp16")
    timing_warmup = min(cfg["pipeline"]["warmup_steps"], steps_per_epoch // 4)

    print(f"reference: {data.train_size} train images, {num_classes} classes, device {device}, loader {data.name} "
          f"({workers} workers), {steps_per_epoch} steps/epoch, sides {sides} px, precision {t['precision']}, "
          f"channels_last {channels_last}, compile {args.compile}, peak lr {t['lr'] * scale:g}, seed {seed}, "
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
        for step, (x, y) in enumerate(data.train(epoch, steps_per_epoch)):
            if step == timing_warmup:
                if cuda:
                    torch.cuda.synchronize(device)
                t0, timed_samples = time.perf_counter(), 0
            lr = learning_rate(t, global_step, steps_per_epoch, scale)
            for g in opt.param_groups:
                g["lr"] = lr
            x, target = augment(x, y)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = criterion(net(x), target)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            global_step += 1
            if ema is not None:
                ema.update(model, step=global_step)
            loss_sum += loss.detach().float()
            timed_samples += y.shape[0]
        if cuda:
            torch.cuda.synchronize(device)
        samples_per_s = timed_samples / (time.perf_counter() - t0)
        row = {"epoch": epoch + 1, "lr": lr, "image_size": side_of_epoch(d, epoch),
               "train_loss": loss_sum.item() / steps_per_epoch, "val_loss": None, "val_top1": None, "val_top5": None}
        t_eval = time.perf_counter()
        if t["eval"]:
            row.update(evaluate(torch, net, data, device, autocast_dtype, t["eval_flip"]))
            if ema is not None:
                row.update({"ema_" + k: v for k, v in
                            evaluate(torch, ema.module, data, device, autocast_dtype, t["eval_flip"]).items()})
        now = time.perf_counter()
        row.update({"samples_per_s": samples_per_s, "epoch_s": now - t_epoch,
                    "eval_s": now - t_eval if t["eval"] else None, "wall_s": now - LAUNCH,
                    "steps": steps_per_epoch, "warmup_steps": timing_warmup, "implementation": "torchvision",
                    "loader": data.name, "compile": args.compile, "seed": seed})
        out.write(json.dumps(row) + "\n")
        out.flush()
        top = "n/a" if row["val_top1"] is None else f"{row['val_top1']:.4f} top5 {row['val_top5']:.4f}"
        print(f"epoch {epoch + 1}/{t['epochs']} ({row['image_size']} px): train_loss {row['train_loss']:.4f} top1 "
              f"{top} | {samples_per_s:.0f} samples/s, {row['epoch_s']:.1f} s, wall {row['wall_s']:.1f} s",
              flush=True)
    out.close()
    return 0


def apply_blurpool(torch, module):
    """FFCV's BlurPoolConv2d (ffcv-imagenet train_imagenet.py): a depthwise [1 2 1] x [1 2 1] / 16 blur, zero
    padding 1, before each Conv2d of stride > 1 and >= 16 input channels."""
    class BlurPoolConv2d(torch.nn.Module):
        def __init__(self, conv):
            super().__init__()
            taps = torch.tensor([1.0, 2.0, 1.0])
            self.conv = conv
            self.register_buffer("blur_filter", (taps[:, None] * taps[None, :] / 16).repeat(conv.in_channels, 1, 1, 1))

        def forward(self, x):
            x = torch.nn.functional.conv2d(x, self.blur_filter, padding=1, groups=self.conv.in_channels)
            return self.conv(x)

    for name, child in module.named_children():
        if isinstance(child, torch.nn.Conv2d) and max(child.stride) > 1 and child.in_channels >= 16:
            setattr(module, name, BlurPoolConv2d(child))
        else:
            apply_blurpool(torch, child)


def evaluate(torch, net, data, device, autocast_dtype, flip=False):
    net.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top-1 hits, top-5 hits, samples
    with torch.no_grad():
        for x, y in data.val():
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                logits = net(x).float()
                if flip:
                    # A copy: under reduce-overhead the next replay may reuse the memory of this one's output.
                    logits = (logits.clone() + net(torch.flip(x, dims=[3])).float()) / 2
            k = min(5, logits.shape[1])
            hits = logits.topk(k, 1).indices.eq(y.unsqueeze(1))
            sums[0] += torch.nn.functional.cross_entropy(logits, y, reduction="sum")
            sums[1] += hits[:, :1].sum()
            sums[2] += hits.sum()
            sums[3] += y.shape[0]
    net.train()
    loss, top1, top5, n = sums.tolist()
    return {"val_loss": loss / n, "val_top1": top1 / n, "val_top5": top5 / n} if n else {}


if __name__ == "__main__":
    sys.exit(main())

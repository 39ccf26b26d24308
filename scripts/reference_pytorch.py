#!/usr/bin/env python3
"""The same five host-to-device configurations in Python PyTorch, timed the way `pinfeed bench` times them.

What a careful user would run: torchvision ResNet-50, torchvision ImageFolder with RandomResizedCrop +
RandomHorizontalFlip (PIL decode), then either ToTensor + Normalize on the host (--transfer-dtype float32) or
PILToTensor, uint8 across PCIe and the normalisation on the GPU (uint8, as timm's PrefetchLoader does);
DataLoader(num_workers, pin_memory, persistent_workers=True, prefetch_factor), one per configuration and kept
across repeats (its workers start once, before the first warm-up), `.to(device, non_blocking)`, and for
dual_stream a side-stream prefetcher like timm's PrefetchLoader. Writes the JSON schema of pinfeed's bench.json
(implementation "pytorch") so that `pinfeed bench --reference FILE` and `scripts/tables.py modes` show both side
by side; each row says whether the GPU waited for its CPU input side (cpu_input_bound: more than 5% GPU idle).

--precision: fp32, tf32 (the default: TF32 matmuls and convolutions), bf16 (autocast bfloat16) or fp16 (autocast
float16 with torch.amp.GradScaler("cuda"): scaler.scale(loss).backward(), scaler.step(opt), scaler.update(); the
fused SGD takes the scale and the inf check inside its kernel, so the step never waits for the host); TF32 stays
on for what autocast leaves in float32 unless fp32.

--compile: torch.compile(model) in its default mode (--compile-mode: another), as timm's train.py --torchcompile
does: the forward and, through AOTAutograd, the backward become Inductor graphs; the loss and the fused SGD step
stay eager (that step is already one multi-tensor kernel launch, and wrapping loss.backward() in a compiled
function only breaks the graph there). Compilation is kept out of every timed window: before the first row,
COMPILE_WARMUP_STEPS training steps on one batch of the rows' shape, dtype and memory format compile both graphs
(the seconds go into meta.compile_s), then every row still runs its own --warmup steps; a graph compiled inside a
timed window is reported.

Rows name their variant, so that one table holds several files (`pinfeed bench --reference A --reference B`
labels each row by implementation and precision, e.g. "pytorch+compile bf16"): implementation "pytorch", or
"pytorch+compile"; each row and meta also carry "compile" and "precision".
--device cpu is a smoke test (--modes pageable,gpu_resident,loader_only; compile works there too, through
Inductor's C++ backend); fp16 needs CUDA and is refused there.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader

from reference_config import add_compile_mode

MODES = {  # name: (pin_memory, non_blocking, side-stream prefetch)
    "pageable": (False, False, False),
    "pinned": (True, False, False),
    "non_blocking": (False, True, False),
    "pinned_non_blocking": (True, True, False),
    "dual_stream": (True, True, True),
}


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PRECISIONS = ["fp32", "tf32", "bf16", "fp16"]
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Step 1 compiles the forward and backward graphs, the next ones show that nothing compiles again (GradScaler's
# first fp16 steps skip the update on inf gradients: the same kernels).
COMPILE_WARMUP_STEPS = 3


class GpuNormalize:
    """uint8 (B, 3, H, W) on the device -> float normalised, in the model's memory format."""

    def __init__(self, device, fmt):
        self.mean = torch.tensor([255 * m for m in MEAN], device=device).view(1, 3, 1, 1)
        self.inv_std = torch.tensor([1 / (255 * s) for s in STD], device=device).view(1, 3, 1, 1)
        self.fmt = fmt

    def __call__(self, x):
        return x.contiguous(memory_format=self.fmt).float().sub_(self.mean).mul_(self.inv_std)


class SideStreamPrefetcher:
    """timm's PrefetchLoader idea: copy (and normalise) batch k+1 on a side stream while batch k computes."""

    def __init__(self, loader, device, prepare):
        self.loader, self.device, self.prepare = loader, device, prepare
        self.stream = torch.cuda.Stream(device)

    def __iter__(self):
        first, pending = True, None
        for x, y in self.loader:
            with torch.cuda.stream(self.stream):
                nx = self.prepare(x.to(self.device, non_blocking=True))
                ny = y.to(self.device, non_blocking=True)
            if not first:
                yield pending
            first = False
            torch.cuda.current_stream().wait_stream(self.stream)
            nx.record_stream(torch.cuda.current_stream())
            ny.record_stream(torch.cuda.current_stream())
            pending = (nx, ny)
        if pending is not None:
            yield pending


def make_loader(args, pin_memory):
    # torchvision is imported where it is used: the options are checked without it
    import torchvision
    from torchvision import transforms
    to_tensor = [transforms.PILToTensor()] if args.transfer_dtype == "uint8" else [
        transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    tf = transforms.Compose([transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip()] + to_tensor)
    ds = torchvision.datasets.ImageFolder(os.path.join(os.path.expanduser(args.data), "train"), tf)
    return ds, DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True, num_workers=args.workers,
                          pin_memory=pin_memory, persistent_workers=True, prefetch_factor=args.prefetch_factor)


_STREAMS = {}


def batch_stream(args, pin_memory):
    """One DataLoader per configuration, iterated across epochs and repeats: its workers start once."""
    if pin_memory not in _STREAMS:
        _, loader = make_loader(args, pin_memory)
        _STREAMS[pin_memory] = (loader, cycle(lambda: loader))
    return _STREAMS[pin_memory]


def summarize(values):
    values = sorted(v for v in values if v is not None)
    return (statistics.fmean(values), statistics.median(values)) if values else (None, None)


def time_loader(batches, warmup, steps, sync=lambda: None):
    """The loader_only row: `steps` batches taken with no model, after `warmup`; sync() waits for the device
    (a loader whose batches land on the GPU) before the clock starts and before it stops."""
    for _ in range(warmup):
        next(batches)
    sync()
    waits, samples, t0 = [], 0, time.perf_counter()
    for _ in range(steps):
        w0 = time.perf_counter()
        _, y = next(batches)
        waits.append((time.perf_counter() - w0) * 1e3)
        samples += y.shape[0]
    sync()
    wait_mean, wait_p50 = summarize(waits)
    return {"samples_per_s": samples / (time.perf_counter() - t0), "wait_ms_p50": wait_p50, "wait_ms_mean": wait_mean,
            "gpu_idle": None, "h2d_ms_mean": None}


def cycle(iterable_factory):
    while True:
        for item in iterable_factory():
            yield item


def variant(implementation, args):
    """The row's implementation label: eager and compiled runs of one script side by side in one table."""
    return implementation + ("+compile" if args.compile else "")


class TrainStep:
    """One training step, as every row runs it: forward and loss under autocast (bf16, fp16), backward, fused SGD
    step; fp16 through a GradScaler; with --compile the model is torch.compile's (args.compile_mode where the
    caller has one: "reduce-overhead" replays CUDA graphs; else the default mode)."""

    def __init__(self, args, model, opt, device):
        mode = getattr(args, "compile_mode", None) or "default"
        self.model = torch.compile(model, mode=mode) if args.compile else model
        self.opt, self.device_type = opt, device.type
        self.dtype = AUTOCAST.get(args.precision)
        self.scaler = torch.amp.GradScaler("cuda") if args.precision == "fp16" else None

    def __call__(self, x, y):
        with torch.autocast(self.device_type, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()


def compiled_graphs():
    """Graphs torch.compile has built in this process (Dynamo's own count; 0 where it has none)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return counters["stats"]["unique_graphs"]


def compile_warmup(step, x, y, device):
    """Runs COMPILE_WARMUP_STEPS steps on (x, y) before any row is timed, so that compiling (a minute or more) never
    falls in a row's warm-up while its loader fills its queue. Returns the seconds it took."""
    t0 = time.perf_counter()
    for _ in range(COMPILE_WARMUP_STEPS):
        step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def time_training(args, step_fn, batches, device, name="train"):
    """Runs warmup + steps training steps of step_fn (a TrainStep); CUDA events on the compute stream give the
    compute spans."""
    cuda = device.type == "cuda"
    stream = torch.cuda.current_stream(device) if cuda else None
    spans, waits, samples = [], [], 0
    t0, graphs = time.perf_counter(), compiled_graphs()
    for step in range(args.warmup + args.steps):
        w0 = time.perf_counter()
        x, y = next(batches)
        wait_ms = (time.perf_counter() - w0) * 1e3
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record(stream)
        step_fn(x, y)
        if cuda:
            end.record(stream)
        if step == args.warmup - 1:
            if cuda:
                torch.cuda.synchronize(device)
            t0, graphs = time.perf_counter(), compiled_graphs()
        if step >= args.warmup:
            if cuda:
                spans.append((begin, end))
            waits.append(wait_ms)
            samples += y.shape[0]
    idle = None
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    if compiled_graphs() > graphs:  # the row's figures include compiling: a new shape, dtype or memory format
        print(f"warning: {name}: torch.compile built {compiled_graphs() - graphs} graph(s) inside the timed steps",
              file=sys.stderr, flush=True)
    if spans:
        busy = sum(b.elapsed_time(e) for b, e in spans)
        idle = max(0.0, 1 - busy / spans[0][0].elapsed_time(spans[-1][1]))
    wait_mean, wait_p50 = summarize(waits)
    return {"samples_per_s": samples / seconds, "wait_ms_p50": wait_p50, "wait_ms_mean": wait_mean,
            "gpu_idle": idle, "h2d_ms_mean": None}


def prepare_of(args, device):
    """What a batch goes through on the device before the model: its memory format, and for uint8 the
    normalisation (float32 was normalised by the workers)."""
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    return GpuNormalize(device, fmt) if args.transfer_dtype == "uint8" else (lambda x: x.contiguous(memory_format=fmt))


def example_batch(args, num_classes, device):
    """A batch with the rows' shape, dtype and memory format, for compile_warmup (the pixels do not matter)."""
    dtype = torch.uint8 if args.transfer_dtype == "uint8" else torch.float32
    x = torch.zeros(args.batch_size, 3, args.image_size, args.image_size, dtype=dtype)
    return prepare_of(args, device)(x.to(device)), torch.randint(num_classes, (args.batch_size,), device=device)


def run_mode(args, mode, step, device):
    prepare = prepare_of(args, device)
    if mode == "loader_only":
        _, it = batch_stream(args, False)
        return time_loader(it, args.warmup, args.steps)
    if mode == "gpu_resident":
        _, it = batch_stream(args, False)
        x, y = next(it)
        x, y = prepare(x.to(device)), y.to(device)
        return time_training(args, step, iter(lambda: (x, y), None), device, mode)
    pin, non_blocking, side_stream = MODES[mode]
    loader, it = batch_stream(args, pin)
    if side_stream:
        key = ("prefetch", pin)
        if key not in _STREAMS:
            prefetcher = SideStreamPrefetcher(loader, device, prepare)
            _STREAMS[key] = cycle(lambda: prefetcher)
        batches = _STREAMS[key]
    else:
        batches = ((prepare(x.to(device, non_blocking=non_blocking)), y.to(device, non_blocking=non_blocking))
                   for x, y in it)
    return time_training(args, step, batches, device, mode)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="ImageFolder root (train/ is used)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--arch", default="resnet50", help="a torchvision ResNet (pinfeed's model.arch)")
    p.add_argument("--precision", choices=PRECISIONS, default="tf32",
                   help="fp32 | tf32 | bf16 (autocast) | fp16 (autocast and GradScaler; CUDA only)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model); compiled before the first row, out of every timing")
    add_compile_mode(p)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--transfer-dtype", choices=["float32", "uint8"], default="float32",
                   help="float32: normalised by the workers; uint8: raw pixels, normalised on the GPU")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--prefetch-factor", type=int, default=4)
    p.add_argument("--modes", default="pageable,pinned,non_blocking,pinned_non_blocking,dual_stream,gpu_resident,loader_only")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--device", default="cuda",
                   help="cuda (the comparison) or cpu (a smoke test: pageable, gpu_resident, loader_only)")
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:  # here, not after the rows before it have run
        if m not in MODES and m not in ("gpu_resident", "loader_only"):
            p.error(f"unknown mode {m!r} in --modes")
    if torch.device(args.device).type != "cuda":
        if args.precision == "fp16":
            p.error("--precision fp16 needs CUDA (its GradScaler is torch.amp.GradScaler(\"cuda\")); "
                    "on --device cpu use fp32 or bf16")
        cuda_only = [m for m in args.modes if m != "pageable" and m in MODES]
        if cuda_only:
            p.error(f"--device cpu runs pageable, gpu_resident and loader_only only, not {','.join(cuda_only)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    import torchvision  # after the options: they are checked without it
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # fail early, not after the runs

    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    tf32 = args.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    ds, _ = make_loader(args, False)
    model = getattr(torchvision.models, args.arch)(num_classes=len(ds.classes)).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # fused=True as pinfeed's optimizer, so that the comparison is about the input path
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=device.type == "cuda")
    step = TrainStep(args, model, opt, device)
    compile_s = None
    if args.compile:
        print(f"compiling (torch.compile, {args.compile_mode} mode): {COMPILE_WARMUP_STEPS} steps on one batch",
              flush=True)
        compile_s = compile_warmup(step, *example_batch(args, len(ds.classes), device), device)
        print(f"compiled in {compile_s:.1f} s", flush=True)

    modes = args.modes
    results = {m: [] for m in modes}
    for r in range(args.repeats):
        for m in modes:
            res = run_mode(args, m, step, device)
            results[m].append(res)
            idle = "n/a" if res["gpu_idle"] is None else f"{100 * res['gpu_idle']:.1f}%"
            print(f"repeat {r + 1}/{args.repeats} {m}: {res['samples_per_s']:.1f} samples/s, "
                  f"wait p50 {res['wait_ms_p50']:.3f} ms, GPU idle {idle}", flush=True)

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    rows = []
    for m in modes:
        row = {"implementation": variant("pytorch", args), "mode": m, "mode_ran": m, "compile": args.compile,
               "precision": args.precision}
        for k in ["samples_per_s", "wait_ms_p50", "wait_ms_mean", "gpu_idle", "h2d_ms_mean"]:
            row[k] = [res[k] for res in results[m]]
        row["samples_per_s_median"] = med(row["samples_per_s"])
        row["wait_ms_p50_median"] = med(row["wait_ms_p50"])
        row["wait_ms_mean_median"] = med(row["wait_ms_mean"])
        row["gpu_idle_median"] = med(row["gpu_idle"])
        row["h2d_ms_median"] = None
        rows.append(row)
    # A row is bound by its CPU input side when the GPU waits for it: more than 5% idle. (Its speed need not
    # reach loader_only's: the workers then share the cores with the training process.)
    for row in rows:
        idle = row["gpu_idle_median"]
        row["cpu_input_bound"] = None if idle is None or row["mode"] == "gpu_resident" else idle > 0.05
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "implementation": "pytorch",
            "torch": torch.__version__, "torchvision": torchvision.__version__,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None, "cpu_cores": os.cpu_count(), "workers": args.workers,
            "dataset": args.data, "train_images": len(ds), "image_size": args.image_size,
            "batch_size": args.batch_size, "precision": args.precision, "channels_last": args.channels_last,
            "transfer_dtype": args.transfer_dtype, "dataloader": "one per configuration, kept across repeats",
            "prefetch_factor": args.prefetch_factor, "warmup_steps": args.warmup, "steps": args.steps,
            "repeats": args.repeats, "compile": args.compile,
            "compile_mode": args.compile_mode if args.compile else None,
            "compiled": f"model (forward, backward), {args.compile_mode} mode; loss and SGD step eager"
            if args.compile else None,
            "compile_warmup_steps": COMPILE_WARMUP_STEPS if args.compile else 0, "compile_s": compile_s}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

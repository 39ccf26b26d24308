"""Feeds side by side: one torchvision model trained from one ImageFolder by each feed in turn, each through
pinfeed.watch, in one process.

    python -m pinfeed.compare --root DATA/train --model resnet50 --steps 100 --batch-size 256 --image-size 224 \\
        --precision fp16 --compile reduce-overhead --channels-last --workers 8 --repeats 3 --json compare.json
    python python/pinfeed/compare.py ...        # the same, as a file, without the built module (no pinfeed rows)

Feeds (--feeds, in the order given; all by default), each an endless stream of device-ready batches, epoch after
epoch (drop_last: every batch has the same shape, which CUDA graphs need):
- dataloader: torch.utils.data.DataLoader over torchvision.datasets.ImageFolder with RandomResizedCrop,
  RandomHorizontalFlip, ToTensor and Normalize (ImageNet's mean and std), `--workers` worker processes
  (persistent), shuffled; the batch is copied with a plain `.to(device)` from pageable memory.
- pinned: the same with pin_memory=True and `.to(device, non_blocking=True)` (CUDA only).
- dual_stream: the pinned DataLoader and a prefetcher that copies the next batch on a side CUDA stream while the
  step runs (the compute stream waits for that copy with wait_stream when the batch is handed out, and
  record_stream keeps its memory from being reused before the step has used it): the Python form of pinfeed's
  dual_stream mode (CUDA only).
- pinfeed_cpu, pinfeed_nvjpeg: pinfeed.ImageFolderLoader with decoder="cpu" (libjpeg-turbo in max(1, --workers)
  threads) and decoder="nvjpeg" (the GPU decodes; CUDA and a build with nvJPEG), the same augmentations; skipped,
  with the reason, where pinfeed's compiled module or nvJPEG is not there.
- resident: one batch kept on the device and stepped on again and again: the ceiling of this model's step here.
- resident_unwatched: the same without pinfeed.watch, timed from one wait for the device to the next around its
  timed steps: against resident, what the wrapper costs the step (the table's last line).

Every row trains the same model with the same optimizer (SGD, momentum 0.9, learning rate 0.01 throughout: the
figures are of speed, not of learning) and the same step: autocast in fp16 (with a GradScaler) or bf16 when asked,
channels_last when asked, torch.compile in the mode asked, compiled once on the resident batch before the first row
and reused by all. The images reach the model as float16 (fp16 on CUDA) or float32, in the same memory format for
every feed, so that the compiled graph is the same. Each row takes --warmup steps, then --steps timed steps; rows
are interleaved over --repeats. The table gives, per feed, the median over the repeats ([min-max] of samples/s):

- samples/s: pinfeed.watch's, over the timed steps (on CUDA over the compute stream's timeline);
- wait p50 / p95 ms: the host's wait inside next() for a device-ready batch (the copy's issue included);
- GPU idle: the compute stream's time between steps (pinfeed.watch's module docstring says what it sees and
  what not); n/a on the CPU;
- % of ceiling: samples/s over the resident row's;
- CPU ms per sample: the CPU time of this process, its ended child processes (getrusage RUSAGE_SELF and
  RUSAGE_CHILDREN) and its live ones (/proc: DataLoader's workers), during the timed steps, per timed sample.

Exit codes: 0 done, 1 a row failed (the others are still shown), 2 usage (no such folder, an unknown feed, fp16 on
the CPU).
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time
import traceback

# Run as a file (python .../pinfeed/compare.py), this file's folder comes first on sys.path, where its tensorboard.py
# would stand in for the tensorboard package.
if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import torch  # noqa: E402

try:
    from ._feeds import FEEDS, Context, Skipped
    from .watch import Watch, fmt_ms, format_line
except ImportError:  # run or loaded as a file, outside the package: _feeds.py and watch.py are beside it
    import importlib.util

    def _beside(name):
        spec = importlib.util.spec_from_file_location(
            f"_pinfeed_{name.lstrip('_')}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    _feeds, _watch = _beside("_feeds"), _beside("watch")
    FEEDS, Context, Skipped = _feeds.FEEDS, _feeds.Context, _feeds.Skipped
    Watch, fmt_ms, format_line = _watch.Watch, _watch.fmt_ms, _watch.format_line

LR, MOMENTUM = 0.01, 0.9
COMPILE_WARMUP_STEPS = 3  # the first compiles forward and backward; the next ones show that nothing compiles again
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
COMPILE_MODES = ("none", "default", "reduce-overhead")



class Trainer:
    """The model, its optimizer and one training step, the same for every feed."""

    def __init__(self, args, device, classes):
        import torchvision
        model = torchvision.models.get_model(args.model, weights=None, num_classes=classes).to(device)
        if args.channels_last:
            model = model.to(memory_format=torch.channels_last)
        model.train()
        self.model = model
        self.forward = model if args.compile == "none" else torch.compile(
            model, mode=None if args.compile == "default" else args.compile)
        self.graphs = args.compile == "reduce-overhead" and device.type == "cuda"
        cuda = device.type == "cuda"
        # fused: one kernel for the update, and GradScaler's inf check inside it (no wait for the host each step).
        self.optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, fused=cuda)
        self.scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
        dtype = PRECISIONS[args.precision]
        self.autocast = dict(device_type=device.type, enabled=dtype is not None, **({"dtype": dtype} if dtype else {}))
        self.criterion = torch.nn.CrossEntropyLoss()

    def step(self, images, labels):
        if self.graphs:  # a new step: the CUDA graphs' outputs of the last one are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(**self.autocast):
            loss = self.criterion(self.forward(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


# --- CPU time -----------------------------------------------------------------------------------------------------


def _live_children_cpu():
    """CPU seconds of this process's live descendants (/proc; 0 where there is none): DataLoader's workers, which
    getrusage counts only once they have ended and been waited for."""
    if not os.path.isdir("/proc"):
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    parent, times = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        times[int(name)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    tree, frontier, total = {os.getpid()}, [os.getpid()], 0.0
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
                total += times[child]
    return total


def cpu_seconds():
    """CPU seconds of this process (all its threads), its ended children and its live ones. A child that ends
    between two readings moves from the live sum to RUSAGE_CHILDREN: the difference stays right."""
    try:
        import resource
    except ImportError:  # not a Unix: this process alone
        return time.process_time()
    own, ended = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime + _live_children_cpu()


# --- rows ---------------------------------------------------------------------------------------------------------


UNWATCHED = "resident_unwatched"


def run_unwatched(ctx, trainer, repeat):
    """The resident batch without a Watch: --warmup steps, then --steps timed ones between two waits for the
    device (the host runs ahead of a step this simple, so the device is busy throughout). A record with the
    Watch's fields; wait and idle are not measured."""
    args = ctx.args
    images, labels = ctx.resident()
    sync = (lambda: torch.cuda.synchronize(ctx.device)) if ctx.cuda else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        trainer.step(images, labels)
    sync()
    t1, cpu0 = time.perf_counter(), cpu_seconds()
    for _ in range(args.steps):
        trainer.step(images, labels)
    cpu = cpu_seconds() - cpu0
    sync()
    seconds, samples = time.perf_counter() - t1, args.steps * args.batch_size
    return {"name": UNWATCHED, "epoch": repeat, "steps": args.steps, "samples": samples, "seconds": seconds,
            "samples_per_s": samples / seconds, "steps_per_s": args.steps / seconds, "wait_ms_p50": None,
            "wait_ms_p95": None, "gpu_idle": None, "warmup_steps": args.warmup, "warmup_seconds": t1 - t0,
            "cpu_seconds": cpu, "cpu_ms_per_sample": 1e3 * cpu / samples}


def run_row(name, ctx, trainer, repeat):
    """One row: --warmup steps, then --steps timed ones, through a Watch. The Watch's record, plus cpu_seconds and
    cpu_ms_per_sample. Raises Skipped where the feed cannot run."""
    args = ctx.args
    if name == UNWATCHED:
        return run_unwatched(ctx, trainer, repeat)
    batches = FEEDS[name][1](ctx)
    w = Watch(batches, warmup_steps=args.warmup, batch_size=args.batch_size, log=None, epoch=repeat, name=name)
    try:
        it = iter(w)
        for _ in range(args.warmup):
            trainer.step(*next(it))
        cpu0 = cpu_seconds()
        for _ in range(args.steps):
            trainer.step(*next(it))
        cpu = cpu_seconds() - cpu0  # before end_epoch's wait for the GPU, which can spin a core
        record = w.end_epoch()
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        for c in ctx.closers:
            c()
        ctx.closers.clear()
        del batches, w
        gc.collect()  # DataLoader's workers end with their iterator
    record["cpu_seconds"] = cpu
    record["cpu_ms_per_sample"] = 1e3 * cpu / record["samples"] if record["samples"] else None
    return record


def summarize(records):
    """A row's figures over its repeats: median of each, and samples/s's min and max."""
    def med(key):
        values = [r[key] for r in records if r[key] is not None]
        return statistics.median(values) if values else None
    rates = [r["samples_per_s"] for r in records if r["samples_per_s"] is not None]
    return {"samples_per_s": med("samples_per_s"), "samples_per_s_min": min(rates) if rates else None,
            "samples_per_s_max": max(rates) if rates else None, "wait_ms_p50": med("wait_ms_p50"),
            "wait_ms_p95": med("wait_ms_p95"), "gpu_idle": med("gpu_idle"),
            "cpu_ms_per_sample": med("cpu_ms_per_sample")}


def _num(v, fmt):
    return "n/a" if v is None else format(v, fmt)


def table(rows, repeats):
    """The markdown table and its notes, as lines."""
    ceiling = next((r["summary"]["samples_per_s"] for r in rows if r["feed"] == "resident" and "summary" in r), None)
    lines = ["| feed | samples/s | wait p50 ms | wait p95 ms | GPU idle | % of ceiling | CPU ms per sample |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "summary" not in r:
            lines.append(f"| {r['feed']} | {r['status']}: {r['reason']} | | | | | |")
            continue
        s = r["summary"]
        rate = _num(s["samples_per_s"], ",.0f")
        if repeats > 1 and s["samples_per_s"] is not None:
            rate += f" [{s['samples_per_s_min']:,.0f}-{s['samples_per_s_max']:,.0f}]"
        share = (f"{100 * s['samples_per_s'] / ceiling:.1f}%" if ceiling and s["samples_per_s"] is not None
                 else "n/a")
        idle = "n/a" if s["gpu_idle"] is None else f"{100 * s['gpu_idle']:.1f}%"
        lines.append(f"| {r['feed']} | {rate} | {fmt_ms(s['wait_ms_p50'])} | {fmt_ms(s['wait_ms_p95'])} | {idle} | "
                     f"{share} | {fmt_ms(s['cpu_ms_per_sample'])} |")
    lines.append("")
    measured = [r for r in rows if "summary" in r and r["summary"]["samples_per_s"] is not None]
    if repeats > 1:
        close = [f"{a['feed']} ~ {b['feed']}" for i, a in enumerate(measured) for b in measured[i + 1:]
                 if a["summary"]["samples_per_s_min"] <= b["summary"]["samples_per_s_max"]
                 and b["summary"]["samples_per_s_min"] <= a["summary"]["samples_per_s_max"]]
        if close:
            lines.append("rows within each other's spread are not ranked: " + ", ".join(close))
    elif len(measured) > 1:
        lines.append("one run per row: no spread measured, rows a few % apart may swap places in another run "
                     "(--repeats 3)")
    if ceiling is None:
        lines.append("% of ceiling: n/a without the resident row")
    bare = next((r["summary"]["samples_per_s"] for r in rows if r["feed"] == UNWATCHED and "summary" in r), None)
    if ceiling and bare:
        lines.append(f"pinfeed.watch's cost: {100 * (1 - ceiling / bare):.2f}% of the step's samples/s (resident "
                     f"against {UNWATCHED})")
    return lines


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m pinfeed.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="an ImageFolder split: ROOT/<class>/<image>")
    p.add_argument("--model", default="resnet50", help="a torchvision model's name (torchvision.models.get_model)")
    p.add_argument("--steps", type=int, default=50, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=10, help="steps per row before the timed ones")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--precision", choices=list(PRECISIONS), default=None,
                   help="autocast: fp16 (with a GradScaler; CUDA only), bf16, or none (fp32). Default: fp16 on CUDA, "
                        "fp32 on the CPU")
    p.add_argument("--compile", choices=COMPILE_MODES, default="none",
                   help="torch.compile mode of the model (reduce-overhead: CUDA graphs, the fastest step)")
    p.add_argument("--channels-last", action="store_true", help="model and batches in channels_last")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                   help="DataLoader worker processes; pinfeed's decode threads: max(1, W)")
    p.add_argument("--feeds", default=",".join(FEEDS), help=f"comma-separated, from {', '.join(FEEDS)}")
    p.add_argument("--repeats", type=int, default=1, help="runs of each row, interleaved")
    p.add_argument("--device", default=None, help="cuda (cuda:N) or cpu; default cuda where there is one")
    p.add_argument("--json", metavar="OUT", help="also write every repeat's record and the summary to OUT")
    args = p.parse_args(argv)
    args.feeds = [f for f in args.feeds.split(",") if f]
    unknown = [f for f in args.feeds if f not in FEEDS]
    if unknown or not args.feeds:
        p.error(f"unknown feed(s) {', '.join(unknown) or '(none given)'}: choose from {', '.join(FEEDS)}")
    for name in ("steps", "batch_size", "image_size", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.workers < 0:
        p.error("--warmup and --workers must be >= 0")
    if not os.path.isdir(args.root):
        p.error(f"--root {args.root}: no such folder (an ImageFolder split: ROOT/<class>/<image>)")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        p.error(f"--device {args.device}: {e}")
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {args.device}: CUDA is not available")
    if device.type not in ("cuda", "cpu"):
        p.error(f"--device must be cuda or cpu, not {args.device}")
    if args.precision is None:
        args.precision = "fp16" if device.type == "cuda" else "fp32"
    if args.precision == "fp16" and device.type != "cuda":
        p.error("--precision fp16 needs CUDA; on the CPU use bf16 or fp32")
    return args, p


def main(argv=None):
    args, parser = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    ctx = Context(args, device)
    if any(f.startswith("pinfeed_") for f in args.feeds):
        try:  # before CUDA starts: `import pinfeed` sets CUDA_DEVICE_MAX_CONNECTIONS for its decoder's streams
            ctx.pinfeed()
        except Skipped:
            pass
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    try:
        dataset = ctx.dataset()
    except (FileNotFoundError, RuntimeError) as e:
        parser.error(f"--root {args.root}: {e}")
    if len(dataset) < args.batch_size:
        parser.error(f"--root {args.root} has {len(dataset)} images, fewer than one batch of {args.batch_size}")
    trainer = Trainer(args, device, len(dataset.classes))
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    log(f"{args.model}, batch {args.batch_size}, {args.image_size} px, {args.precision}, compile {args.compile}"
        f"{', channels_last' if args.channels_last else ''}, {device}"
        f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}; {len(dataset)} images "
        f"in {len(dataset.classes)} classes; {args.warmup} + {args.steps} steps per row, {args.repeats} repeat(s)")
    compile_s = None
    if args.compile != "none":
        t0 = time.perf_counter()
        for _ in range(COMPILE_WARMUP_STEPS):
            trainer.step(*ctx.resident())
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        compile_s = time.perf_counter() - t0
        log(f"compiled in {compile_s:.1f} s")

    rows = [{"feed": f, "what": FEEDS[f][0], "records": []} for f in args.feeds]
    failed = False
    for repeat in range(args.repeats):
        for row in rows:
            if "reason" in row:  # skipped or failed before: not tried again
                continue
            try:
                record = run_row(row["feed"], ctx, trainer, repeat)
            except Skipped as e:
                row.update(status="skipped", reason=str(e))
                log(f"{row['feed']}: skipped: {e}")
                continue
            except Exception as e:  # noqa: BLE001 (the other rows still run; the traceback is shown)
                traceback.print_exc()
                row.update(status="failed", reason=f"{type(e).__name__}: {e}")
                failed = True
                continue
            row["records"].append(record)
            log(format_line(dict(record, complete=True), label=f"{row['feed']} (run {repeat + 1}/{args.repeats})"))
    for row in rows:
        if row["records"] and "reason" not in row:
            row["summary"] = summarize(row["records"])
    print("\n".join(table(rows, args.repeats)))
    if args.json:
        meta = {"argv": sys.argv[1:] if argv is None else list(argv), "torch": torch.__version__,
                "device": str(device), "device_name": torch.cuda.get_device_name(device) if ctx.cuda else None,
                "cpu_count": os.cpu_count(), "images": len(dataset), "classes": len(dataset.classes),
                "compile_s": compile_s, "options": {k: v for k, v in vars(args).items()}}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""pinfeed's Python module against DALI and torch's DataLoader, each feeding the same compiled ResNet-50 step.

The step is scripts/reference_pytorch.py's TrainStep: torchvision resnet50 under torch.compile (--compile-mode), fp16
autocast with a GradScaler, channels_last, fused SGD; batch 256 by default. Rows, for each image size and each
number of CPU threads, all reading the same JPEG folder:
- pinfeed_<decoder>: pinfeed.ImageFolderLoader(decoder=..., threads=T, dtype=float16, channels_last) (the
  decoders of --pinfeed-decoders: nvjpeg, the GPU's decode, and cpu);
- dali_mixed_<load>: DALI's fn.decoders.image_random_crop(device="mixed") pipeline and its DALIGenericIterator,
  as scripts/reference_dali.py builds it (num_threads=T, hw_decoder_load=<load>, float16 HWC out), a row for each
  load of --hw-decoder-loads; skipped, with a message, when nvidia.dali cannot be imported;
- dataloader: torchvision ImageFolder + RandomResizedCrop + RandomHorizontalFlip + PILToTensor, DataLoader(
  num_workers=T, pin_memory, persistent_workers, prefetch_factor 4), uint8 over PCIe on a side stream (reference_
  pytorch's SideStreamPrefetcher), normalised to float16 channels_last on the GPU;
- resident: the same step on one batch kept on the GPU: the ceiling. It runs before a size's first row and again
  after each row, and a row's ceiling is the mean of the two resident rows around it (the step's own rate drifts
  by several % within a process: the GPU's clocks, a first row faster than the later ones).
Per row: samples/s over the timed steps (reference_pytorch.time_training: synchronised wall time after the warm-up
steps), its share of its ceiling, the GPU's idle share, the host CPU seconds the whole process tree spent in those
steps (this process's threads and any worker processes, from /proc: DataLoader's workers are live children that
getrusage does not count) per sample and as cores kept busy, and the tree's resident memory at the row's end
(RSS summed, and PSS, which counts pages shared between the workers once). torch.compile compiles each size's
graphs on the resident batch before any row of that size is timed (automatic dynamic shapes off: one static
graph per size).
    python scripts/bench_python_feed.py --root DATA/train --out bench_python_feed.json
"""
import argparse
import datetime
import gc
import json
import os
import sys
import time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
from reference_config import add_compile_mode  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="ImageFolder split (class folders); a root holding train/ works too")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--sizes", default="224,160")
    p.add_argument("--threads", default="2,4", help="CPU decode threads / DALI num_threads / DataLoader workers")
    p.add_argument("--feeds", default="pinfeed,dali,dataloader")
    p.add_argument("--pinfeed-decoders", default="nvjpeg,cpu")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps per row (default: one pass over the files and 10 more, so that no row is timed "
                        "in its first pass, where pinfeed's loader checks each JPEG once on the CPU as `pinfeed "
                        "bench` does before timing)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per row")
    p.add_argument("--hw-decoder-loads", default="0.65,0.99",
                   help="DALI mixed: its share for the hardware decoder, a row each (its default; the better at 2 "
                        "threads, docs/gpu-decode.md)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="eager step (a smoke test)")
    add_compile_mode(p, default="reduce-overhead")
    p.add_argument("--device", default="cuda", help="cuda; cpu runs the pinfeed and dataloader rows as a smoke test")
    p.add_argument("--kernel-profile", action="store_true",
                   help="after each size's first resident row, the GPU time of each kernel over 5 resident steps "
                        "(torch.profiler), kept in the JSON's meta: tells a slower step's kernels from slower kernels")
    p.add_argument("--stream", default="default", choices=["default", "side"],
                   help="the loop's CUDA stream: the legacy default stream (a plain PyTorch loop's) or one of its "
                        "own (torch.cuda.set_stream), which does not wait on other libraries' blocking streams")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.threads = [int(t) for t in args.threads.split(",") if t]
    args.feeds = [f for f in args.feeds.split(",") if f]
    args.hw_decoder_loads = [float(v) for v in args.hw_decoder_loads.split(",") if v]
    args.pinfeed_decoders = [d for d in args.pinfeed_decoders.split(",") if d]
    for f in args.feeds:
        if f not in ("pinfeed", "dali", "dataloader"):
            p.error(f"unknown feed {f!r}")
    args.precision = "fp16" if args.device.startswith("cuda") else "fp32"  # what TrainStep reads
    return args


def tree_usage():
    """(CPU seconds, RSS bytes, PSS bytes) of this process and all its descendants, from /proc."""
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                parent[int(name)] = (int(fields[1]), fields)
            except OSError:
                continue
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        for child, (ppid, _) in parent.items():
            if ppid == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    cpu = rss = pss = 0
    for pid in tree:
        if pid not in parent:
            continue
        fields = parent[pid][1]
        cpu += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)
        rss += int(fields[21]) * page
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss += sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except OSError:
            pass
    return cpu, rss, pss


class Metered:
    """The row's batches, noting the process tree's CPU time when the first timed step asks for its batch."""

    def __init__(self, batches, warmup):
        self.batches, self.warmup, self.asked, self.cpu0, self.thread0 = batches, warmup, 0, None, None

    def __iter__(self):
        return self

    def __next__(self):
        if self.asked == self.warmup:
            self.cpu0 = tree_usage()[0]
            self.thread0 = time.thread_time()  # the loop's own thread: it launches the step's kernels
        self.asked += 1
        return next(self.batches)


def cycle(make_epoch):
    while True:
        yield from make_epoch()


def pinfeed_feed(args, size, threads, decoder, device):
    import pinfeed
    import torch
    loader = pinfeed.ImageFolderLoader(args.train_root, args.batch_size, size, decoder=decoder, threads=threads,
                                       device=device, dtype=torch.float16 if device.type == "cuda" else torch.float32,
                                       channels_last=True)

    def epochs():
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            yield from loader
            epoch += 1
    return epochs(), loader.close


def dali_feed(args, size, threads, hw_decoder_load, device):
    import reference_dali
    dargs = argparse.Namespace(train_root=args.train_root, image_size=size, batch_size=args.batch_size,
                               dtype="float16", channels_last=True, seed=12, prefetch_queue_depth=3)
    hint = reference_dali.largest_image(args.train_root, reference_dali.classes_of(args.train_root))
    pipe, iterator = reference_dali.build_pipeline(dargs, "mixed", threads, hw_decoder_load, hint, True,
                                                   device.index if device.index is not None else 0)
    batches = reference_dali.dali_batches(iterator, channels_last=True, float_input=False)

    def close():
        nonlocal pipe, iterator
        batches.close()
        del pipe, iterator
    return batches, close


def dataloader_feed(args, size, threads, device):
    import torch
    import torchvision
    from torchvision import transforms
    from reference_pytorch import SideStreamPrefetcher
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(args.train_root, tf)
    cuda = device.type == "cuda"
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                         num_workers=threads, pin_memory=cuda, persistent_workers=True,
                                         prefetch_factor=4)
    mean = torch.tensor([255 * m for m in MEAN], device=device).view(1, 3, 1, 1)
    inv_std = torch.tensor([1 / (255 * s) for s in STD], device=device).view(1, 3, 1, 1)
    dtype = torch.float16 if cuda else torch.float32

    def prepare(x):
        return x.contiguous(memory_format=torch.channels_last).float().sub_(mean).mul_(inv_std).to(dtype)
    if cuda:
        prefetcher = SideStreamPrefetcher(loader, device, prepare)
        batches = cycle(lambda: prefetcher)
    else:
        batches = cycle(lambda: ((prepare(x), y) for x, y in loader))

    def close():
        nonlocal loader
        batches.close()
        loader._iterator = None  # persistent workers end with their iterator
        del loader
    return batches, close


def run_row(args, step, batches, device, name):
    from reference_pytorch import time_training
    metered = Metered(batches, args.warmup)
    res = time_training(args, step, metered, device, name)
    loop_thread_s = time.thread_time() - metered.thread0
    cpu1, rss, pss = tree_usage()
    samples = args.steps * args.batch_size
    seconds = samples / res["samples_per_s"]
    cpu_s = cpu1 - metered.cpu0
    return {"samples_per_s": res["samples_per_s"], "gpu_idle": res["gpu_idle"], "wait_ms_p50": res["wait_ms_p50"],
            "host_cpu_s": cpu_s, "host_cpu_ms_per_sample": 1e3 * cpu_s / samples, "host_cores_busy": cpu_s / seconds,
            "rss_mb": rss / 2**20, "pss_mb": pss / 2**20,
            # Near the step's time when the loop's thread is what bounds it (launching the kernels); well below it
            # when that thread waits (for the GPU, a lock, a core).
            "loop_thread_cpu_ms_per_step": 1e3 * loop_thread_s / args.steps, "step_ms": 1e3 * seconds / args.steps}


def traced_steps(step, x, y, device, steps):
    """The Kineto trace's events of `steps` resident steps under torch.profiler, each in a "pinfeed::step" range as
    pinfeed's own traces have them: scripts/trace_kernels.py and trace_gaps.py read either."""
    import tempfile
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from trace_idle import load
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            with record_function("pinfeed::step"):
                step(x, y)
        torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(f"{tmp}/trace.json")
        return load(f"{tmp}/trace.json")["traceEvents"]


def kernel_profile(step, x, y, device, steps=5):
    """scripts/trace_kernels.py's kernel times per step over `steps` resident steps."""
    from trace_kernels import kernel_times
    return kernel_times(traced_steps(step, x, y, device, steps))


def make_step(args, device):
    """The step every row trains (reference_pytorch.TrainStep on torchvision's ResNet-50) and the split's classes.
    Sets args.train_root and, where --warmup is not given, args.warmup: one pass over the files and 10 steps."""
    import torch
    import torchvision
    from reference_dali import classes_of, train_dir
    from reference_pytorch import TrainStep
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch._dynamo.config.automatic_dynamic_shapes = False  # a static graph per image size
    args.train_root = train_dir(args.root)
    classes = classes_of(args.train_root)
    if args.warmup is None:
        files = sum(len(names) for _, _, names in os.walk(args.train_root, followlinks=True))
        args.warmup = -(-files // args.batch_size) + 10
    model = torchvision.models.resnet50(num_classes=len(classes)).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=device.type == "cuda")
    return TrainStep(args, model, opt, device), classes


def main(argv=None):
    args = parse_args(argv)
    if "pinfeed" in args.feeds:
        import pinfeed  # noqa: F401  before CUDA starts: it asks for 32 hardware queues (docs/python-module.md)
    import torch
    import torchvision
    from reference_pytorch import compile_warmup
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # fail now, not after the rows

    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(device)
        if args.stream == "side":
            torch.cuda.set_stream(torch.cuda.Stream(device))
    step, classes = make_step(args, device)
    feeds = list(args.feeds)
    if "dali" in feeds:
        try:
            from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: F401
        except ImportError as e:
            print(f"dali rows skipped: nvidia.dali is not importable ({e}); pip install nvidia-dali-cuda130",
                  file=sys.stderr)
            feeds.remove("dali")
        if device.type != "cuda" and "dali" in feeds:
            print("dali rows skipped: the mixed decoder needs CUDA", file=sys.stderr)
            feeds.remove("dali")

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    rows, compile_s, kernels_by_size = [], {}, {}
    for size in args.sizes:
        x = torch.randn(args.batch_size, 3, size, size, device=device, dtype=dtype).contiguous(
            memory_format=torch.channels_last)
        y = torch.randint(len(classes), (args.batch_size,), device=device)
        compile_s[size] = compile_warmup(step, x, y, device)
        print(f"{size} px: warm-up steps (compiling: {args.compile}) took {compile_s[size]:.1f} s", flush=True)

        def resident_row():
            rows.append(dict(feed="resident", decoder=None, threads=None, image_size=size,
                             **run_row(args, step, iter(lambda: (x, y), None), device, "resident")))
            report(rows[-1])
            return rows[-1]["samples_per_s"]
        before = resident_row()
        if args.kernel_profile and device.type == "cuda":
            try:
                kernels_by_size[size] = kernel_profile(step, x, y, device)
                print(f"{size} px: {kernels_by_size[size]['gpu_ms_per_step']:.2f} ms of kernels a step", flush=True)
            except Exception as e:  # a probe's extra: the timed rows stand without it
                kernels_by_size[size] = {"error": repr(e)}
        for threads in args.threads:
            plan = []
            if "pinfeed" in feeds:
                plan += [(f"pinfeed_{d}", d, lambda d=d: pinfeed_feed(args, size, threads, d, device))
                         for d in args.pinfeed_decoders if device.type == "cuda" or d == "cpu"]
            if "dali" in feeds:
                plan += [(f"dali_mixed_{load}", "mixed", lambda load=load: dali_feed(args, size, threads, load, device))
                         for load in args.hw_decoder_loads]
            if "dataloader" in feeds:
                plan.append(("dataloader", "pil", lambda: dataloader_feed(args, size, threads, device)))
            for name, decoder, make in plan:
                batches, close = make()
                try:
                    res = run_row(args, step, batches, device, name)
                finally:
                    close()
                    del batches, close
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    gc.collect()
                row = dict(feed=name, decoder=decoder, threads=threads, image_size=size, **res)
                rows.append(row)
                after = resident_row()
                row["ceiling_samples_per_s"] = (before + after) / 2
                row["pct_of_ceiling"] = 100 * row["samples_per_s"] / row["ceiling_samples_per_s"]
                report(row)
                before = after
        del x, y
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "gpu": torch.cuda.get_device_name(device)
            if device.type == "cuda" else None, "cpu_cores": os.cpu_count(), "dataset": args.train_root,
            "classes": len(classes), "batch_size": args.batch_size, "precision": args.precision,
            "compile": args.compile, "compile_mode": args.compile_mode, "channels_last": True, "stream": args.stream,
            "warmup_steps": args.warmup, "steps": args.steps,
            "warmup_s_by_size": compile_s, "hw_decoder_loads": args.hw_decoder_loads,
            "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
            "pinfeed_imported": "pinfeed" in sys.modules, "kernels_by_size": kernels_by_size}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    print(f"written to {args.out}")
    return 0


def report(row):
    pct = row.get("pct_of_ceiling", 100.0)
    idle = "n/a" if row["gpu_idle"] is None else f"{100 * row['gpu_idle']:.1f}%"
    print(f"{row['image_size']} px {row['feed']:<15} threads {str(row['threads']):<4} {row['samples_per_s']:8.1f} "
          f"samples/s {pct:5.1f}% of ceiling, GPU idle {idle}, host CPU {row['host_cpu_ms_per_sample']:.2f} ms/sample "
          f"({row['host_cores_busy']:.1f} cores), loop thread {row['loop_thread_cpu_ms_per_step']:.1f} ms CPU of a "
          f"{row['step_ms']:.1f} ms step, RSS {row['rss_mb']:.0f} MB, PSS {row['pss_mb']:.0f} MB", flush=True)


if __name__ == "__main__":
    sys.exit(main())

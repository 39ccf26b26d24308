#!/usr/bin/env python3
"""NVIDIA DALI feeding torchvision ResNet-50 training: a comparison peer of `pinfeed bench`.

Measured exactly as scripts/reference_pytorch.py measures (its time_training is reused, not copied): per repeat
W warm-up steps, then N timed steps; samples/s over synchronised wall time; wait = host time spent getting the
next device-ready batch; GPU idle = 1 - (sum of the training steps' CUDA-event spans) / (first begin to last
end). The model, optimiser and training step are reference_pytorch's (its TrainStep): torchvision resnet50, fused
SGD (lr 0.1, momentum 0.9, weight decay 1e-4), cross-entropy, cudnn.benchmark, TF32 unless fp32, bf16 autocast with
--precision bf16, fp16 autocast with a GradScaler with --precision fp16, the model in channels_last with
--channels-last (the default). --compile: torch.compile(model), default mode (--compile-mode), as in
reference_pytorch.py: compiled by reference_pytorch.COMPILE_WARMUP_STEPS steps on the first pipeline's first batch
before anything is timed (its seconds in meta.compile_s); every point's --warmup steps still follow. The JSON is the
schema of pinfeed's bench.json (implementation "dali", or "dali+compile"; each row and meta also carry "compile" and
"precision"), so `pinfeed bench --reference FILE` and `scripts/tables.py modes` show it beside pinfeed; each row also
names its decoder, threads and hw_decoder_load, and says whether the GPU waited for its input (cpu_input_bound: more
than 5% GPU idle).

DALI's setup, its strongest idiomatic one (DALI's own PyTorch ResNet-50 example, docs/examples/use_cases/
pytorch/resnet50/main.py, adapted to the ImageNet recipe's augmentation):
- fn.readers.file(file_root, random_shuffle=True): labels from the sorted class folders, as ImageFolder. The
  iterator has no reader_name: one endless stream across epochs (the reader wraps around by itself, as
  pinfeed's loader crosses epochs), so that no epoch boundary stalls a timed window.
- --decoder mixed: fn.decoders.image_random_crop(device="mixed"): nvJPEG, with hw_decoder_load of the images
  on the GPU's hardware JPEG engines (NVJPG; the rest on CUDA + CPU threads), preallocate_width_hint /
  preallocate_height_hint = the largest image of a sample of the dataset, so the hardware decoder does not
  reallocate at run time; --decoder cpu: the same operator with device="cpu" (libjpeg-turbo, only the crop's
  region decoded), then .gpu(): resize, flip and normalisation on the GPU, as DALI's docs recommend for CPU
  decoding (the CPU does only what cannot move). Both: random_area [0.08, 1], random_aspect_ratio [3/4, 4/3],
  10 attempts (torchvision's RandomResizedCrop).
- fn.resize to image_size x image_size (linear, antialiased: the replacement of INTERP_TRIANGULAR that the
  example uses), fn.crop_mirror_normalize with mirror = fn.random.coin_flip(0.5), ImageNet mean/std x 255,
  output_layout "HWC" with --channels-last (the NHWC buffer, permuted, is a channels_last NCHW tensor: no
  copy) else "CHW", dtype FLOAT16 with bf16 (half the bytes; autocast casts it for the first convolution) and
  with fp16 (what autocast computes in), FLOAT otherwise (--dtype overrides).
- DALIGenericIterator over the pipeline (exec_dynamic, DALI 2's default executor: its outputs reach PyTorch
  through DLPack, no copy, ordered on PyTorch's current stream), prefetch_queue_depth 3 (DALI's default 2),
  num_threads = --threads CPU threads, seed 12.

--sweep: the curve threads x decoder (default {1, 2, 4, 8, 13} x {mixed at hw_decoder_load 0.65 and 0.99, cpu})
in one process and one JSON: the model and optimiser are built once; each point's pipeline is built, measured
and deleted, points interleaved within each repeat (drift hits every point alike); a gpu_resident row (one
fixed batch on the GPU: the compute ceiling) each repeat. --plot PNG draws samples/s against threads, with
pinfeed's dual_stream curve from `pinfeed bench` JSONs at the same data.workers (--pinfeed-bench; --replot draws
from an existing --out JSON without running).
--device cpu is a smoke test without a GPU: the whole pipeline on the CPU (device_id None), cpu decoder only,
fp32 (--compile works there too). Exits 3 with a message when DALI cannot be imported.
"""
import argparse
import datetime
import gc
import json
import os
import statistics
import sys

from reference_config import add_compile_mode

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
EXIT_NO_DALI = 3
DALI_PACKAGE = "nvidia-dali-cuda130==2.4.0"
FIGURES = ["samples_per_s", "wait_ms_p50", "wait_ms_mean", "gpu_idle", "h2d_ms_mean"]


def int_list(text):
    return [int(v) for v in text.split(",") if v]


def float_list(text):
    return [float(v) for v in text.split(",") if v]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", help="ImageFolder train directory (class folders); a dataset root holding train/ works too")
    p.add_argument("--decoder", choices=["mixed", "cpu"], default="mixed",
                   help="mixed: nvJPEG with the hardware JPEG engines; cpu: libjpeg-turbo on CPU threads")
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 3), help="DALI num_threads")
    p.add_argument("--hw-decoder-load", type=float, default=0.65, help="mixed: share of images for the HW decoder")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="bf16",
                   help="fp32 | tf32 | bf16 (autocast) | fp16 (autocast and GradScaler)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model); compiled before the first point, out of every timing")
    add_compile_mode(p)
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--dtype", choices=["auto", "float16", "float"], default="auto",
                   help="DALI output dtype (auto: float16 with bf16 and fp16, else float)")
    p.add_argument("--prefetch-queue-depth", type=int, default=3)
    p.add_argument("--modes", default="train,gpu_resident",
                   help="rows: train (DALI feeding the training), gpu_resident (one batch kept on the GPU: the "
                        "ceiling), loader_only (the DALI pipeline alone)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per repeat (default 20; --sweep: 10)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per repeat (default 100; --sweep: 40)")
    p.add_argument("--sweep", action="store_true", help="the curve: every --sweep-threads x --sweep-decoders point")
    p.add_argument("--sweep-threads", type=int_list, default=[1, 2, 4, 8, 13])
    p.add_argument("--sweep-decoders", default="mixed,cpu")
    p.add_argument("--sweep-hw-loads", type=float_list, default=[0.65, 0.99], help="mixed points, each of these")
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--plot", default=None, help="PNG of samples/s against threads (needs matplotlib)")
    p.add_argument("--pinfeed-bench", nargs="*", default=[], metavar="BENCH_JSON",
                   help="with --plot: `pinfeed bench` outputs (one per data.workers value) drawn as pinfeed's "
                        "dual_stream curve against its decode threads")
    p.add_argument("--replot", action="store_true", help="only draw --plot from the existing --out JSON")
    p.add_argument("--device", default="cuda", help="cuda (the comparison) or cpu (a smoke test)")
    args = p.parse_args(argv)
    if args.replot and not args.plot:
        p.error("--replot needs --plot")
    if not args.root and not args.replot:
        p.error("--root is required")
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in ("train", "gpu_resident", "loader_only"):
            p.error(f"unknown mode {m!r} in --modes")
    decoders = [d for d in args.sweep_decoders.split(",") if d]
    for d in decoders:
        if d not in ("mixed", "cpu"):
            p.error(f"unknown decoder {d!r} in --sweep-decoders")
    if args.sweep:
        args.points = [(d, t, hw) for t in args.sweep_threads for d in decoders
                       for hw in (args.sweep_hw_loads if d == "mixed" else [None])]
    else:
        args.points = [(args.decoder, args.threads, args.hw_decoder_load if args.decoder == "mixed" else None)]
    # The sweep's slowest points (one CPU thread decoding) run at a few hundred images/s: shorter windows there.
    args.warmup = args.warmup if args.warmup is not None else (10 if args.sweep else 20)
    args.steps = args.steps if args.steps is not None else (40 if args.sweep else 100)
    if any(t < 1 for _, t, _ in args.points):
        p.error("threads must be >= 1")
    if args.device == "cpu":
        if any(d == "mixed" for d, _, _ in args.points):
            p.error("--device cpu runs the cpu decoder only (the mixed decoder needs a GPU)")
        if args.precision != "fp32":
            print(f"--device cpu: precision {args.precision} -> fp32", file=sys.stderr)
            args.precision = "fp32"
    if args.dtype == "auto":
        args.dtype = "float16" if args.precision in ("bf16", "fp16") else "float"
    return args


def import_dali():
    """DALI and its PyTorch plugin, or a clear message and exit 3."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.types  # noqa: F401
        from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: F401
    except ImportError as e:
        print(f"error: NVIDIA DALI is not importable ({e}). This peer needs it: pip install {DALI_PACKAGE} "
              "(CUDA 13 build; nvidia-dali-cuda120 for CUDA 12), in the Python that has torch and torchvision.",
              file=sys.stderr)
        sys.exit(EXIT_NO_DALI)
    return nvidia.dali


def train_dir(root):
    root = os.path.expanduser(root)
    nested = os.path.join(root, "train")
    return nested if os.path.isdir(nested) else root


def classes_of(root):
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if not classes:
        raise SystemExit(f"error: {root} has no class folders")
    return classes


def largest_image(root, classes, sample=512):
    """(width, height) maxima over up to `sample` files spread over the classes (headers only, by PIL)."""
    from PIL import Image
    files = []
    per_class = max(1, sample // len(classes))
    for c in classes:
        names = sorted(os.listdir(os.path.join(root, c)))[:per_class]
        files += [os.path.join(root, c, n) for n in names]
    w = h = 0
    for f in files[:sample]:
        try:
            with Image.open(f) as im:
                w, h = max(w, im.width), max(h, im.height)
        except OSError:
            continue
    return w, h


def build_pipeline(args, decoder, threads, hw_load, hint, on_gpu, device_index):
    """One point's pipeline and its endless iterator."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    size = args.image_size
    crop = dict(output_type=types.RGB, random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)

    @pipeline_def
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=args.train_root, random_shuffle=True, name="Reader")
        if decoder == "mixed":
            images = fn.decoders.image_random_crop(jpegs, device="mixed", hw_decoder_load=hw_load,
                                                   preallocate_width_hint=hint[0], preallocate_height_hint=hint[1],
                                                   **crop)
        else:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", **crop)
            if on_gpu:
                images = images.gpu()
        images = fn.resize(images, resize_x=size, resize_y=size)  # linear, antialiased
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT16 if args.dtype == "float16" else types.FLOAT,
            output_layout="HWC" if args.channels_last else "CHW",
            mean=[255 * m for m in MEAN], std=[255 * s for s in STD], mirror=fn.random.coin_flip(probability=0.5))
        return images, labels.gpu() if on_gpu else labels

    pipe = pipeline(batch_size=args.batch_size, num_threads=threads, device_id=device_index if on_gpu else None,
                    seed=args.seed, prefetch_queue_depth=args.prefetch_queue_depth)
    pipe.build()
    # No reader_name and size -1: the iterator runs until the pipeline stops, which a file reader never does.
    return pipe, DALIGenericIterator([pipe], ["data", "label"])


def dali_batches(iterator, channels_last, float_input):
    """(images (B, 3, S, S), labels (B,) int64) on the pipeline's device, as the training step takes them."""
    import torch
    while True:
        try:
            out = next(iterator)[0]
        except StopIteration:  # not expected from an endless stream; start over if it comes
            iterator.reset()
            continue
        x, y = out["data"], out["label"].squeeze(-1).long()
        if channels_last:
            x = x.permute(0, 3, 1, 2)  # NHWC memory seen as NCHW: a channels_last tensor, no copy
        if float_input and x.dtype != torch.float32:
            x = x.float()
        yield x, y


def loader_only(args, batches, device):
    import torch
    from reference_pytorch import time_loader
    # synchronize() waits for every stream, DALI's too
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    return time_loader(batches, args.warmup, args.steps, sync)


def row_name(decoder, threads, hw_load):
    return f"dali_{decoder}_t{threads}" + (f"_hw{hw_load:g}" if hw_load is not None else "")


def summarise(name, results, extra, args):
    from reference_pytorch import variant

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None
    row = {"implementation": variant("dali", args), "mode": name, "mode_ran": name, "compile": args.compile,
           "precision": args.precision}
    for k in FIGURES:
        row[k] = [r[k] for r in results]
    row["samples_per_s_median"] = med(row["samples_per_s"])
    row["wait_ms_p50_median"] = med(row["wait_ms_p50"])
    row["wait_ms_mean_median"] = med(row["wait_ms_mean"])
    row["gpu_idle_median"] = med(row["gpu_idle"])
    row["h2d_ms_median"] = None
    idle = row["gpu_idle_median"]
    row["cpu_input_bound"] = None if idle is None or extra.get("kind") != "train" else idle > 0.05
    row.update(extra)
    return row


def pinfeed_curve(paths):
    """{decoder: [(decode threads, dual_stream samples/s median)]} from `pinfeed bench` JSON files (meta.decoder:
    "cpu" or "nvjpeg"; files of older pinfeed versions count as "cpu")."""
    curves = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for r in doc["rows"]:
            if r["mode"] == "dual_stream" and r.get("samples_per_s_median"):
                decoder = doc["meta"].get("decoder", "cpu")
                curves.setdefault(decoder, []).append((doc["meta"]["workers"], r["samples_per_s_median"]))
    return {d: sorted(points) for d, points in curves.items()}


def plot_curve(rows, path, pinfeed=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    lines = {}
    for r in rows:
        if r.get("kind") == "train":
            key = r["decoder"] + (f" (hw_decoder_load {r['hw_decoder_load']:g})" if r["hw_decoder_load"] is not None else "")
            lines.setdefault(key, []).append((r["threads"], r["samples_per_s_median"]))
    for key, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([t for t, _ in pts], [v for _, v in pts], marker="o", label=f"DALI {key}")
    for decoder, pts in sorted((pinfeed or {}).items()):
        lines["pinfeed " + decoder] = list(pts)
        ax.plot([t for t, _ in pts], [v for _, v in pts], marker="s", color="black",
                ls="-" if decoder == "nvjpeg" else ":", label=f"pinfeed dual_stream, decoder {decoder}")
    for r in rows:
        if r.get("kind") == "gpu_resident":
            ax.axhline(r["samples_per_s_median"], color="grey", ls="--", label="gpu_resident (compute ceiling)")
    ax.set_xscale("log", base=2)
    threads = sorted({t for pts in lines.values() for t, _ in pts})
    ax.set_xticks(threads, [str(t) for t in threads])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("CPU threads: DALI num_threads" + (", pinfeed data.workers" if pinfeed else ""))
    ax.set_ylabel("samples/s (median of repeats)")
    ax.set_title("ResNet-50 training (torchvision) fed by DALI" + (", and pinfeed" if pinfeed else ""))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    args = parse_args(argv)
    if args.replot:
        with open(args.out) as f:
            plot_curve(json.load(f)["rows"], args.plot, pinfeed_curve(args.pinfeed_bench))
        return 0
    dali = import_dali()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # fail early, not after the runs
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import torchvision
    from reference_pytorch import COMPILE_WARMUP_STEPS, TrainStep, compile_warmup, time_training

    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    device_index = (device.index if device.index is not None else torch.cuda.current_device()) if on_gpu else None
    if on_gpu:
        torch.cuda.set_device(device_index)
    torch.backends.cudnn.benchmark = True
    tf32 = args.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    args.train_root = train_dir(args.root)
    classes = classes_of(args.train_root)
    hint = largest_image(args.train_root, classes)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = torchvision.models.resnet50(num_classes=len(classes)).to(device, memory_format=fmt)
    # fused=True as pinfeed's optimizer and reference_pytorch's, so that the comparison is about the input path
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=on_gpu)
    step = TrainStep(args, model, opt, device)
    # float16 from DALI goes in as it is under autocast (bf16 casts it, fp16 computes in it); else float32
    float_input = args.dtype == "float" or args.precision not in ("bf16", "fp16")
    compile_s = None

    results, extras, resident = {}, {}, None
    for r in range(args.repeats):
        for decoder, threads, hw_load in args.points:
            name = row_name(decoder, threads, hw_load)
            pipe, iterator = build_pipeline(args, decoder, threads, hw_load, hint, on_gpu, device_index)
            batches = dali_batches(iterator, args.channels_last, float_input)
            # on a DALI batch: the very dtype, shape and strides that the rows time
            if args.compile and compile_s is None and ({"train", "gpu_resident"} & set(args.modes)):
                x, y = next(batches)
                print(f"compiling (torch.compile, {args.compile_mode} mode): {COMPILE_WARMUP_STEPS} steps on one batch",
                      flush=True)
                compile_s = compile_warmup(step, x.clone(memory_format=fmt), y.clone(), device)
                print(f"compiled in {compile_s:.1f} s", flush=True)
                del x, y
            if resident is None and "gpu_resident" in args.modes:
                x, y = next(batches)
                resident = (x.clone(memory_format=fmt), y.clone())
            point = dict(decoder=decoder, threads=threads, hw_decoder_load=hw_load)
            for kind in [m for m in ("train", "loader_only") if m in args.modes]:
                res = (time_training(args, step, batches, device, name) if kind == "train"
                       else loader_only(args, batches, device))
                # pinfeed's table frames a row named loader_only; a sweep's are told apart by their point
                key = name if kind == "train" else "loader_only" + (f"_{name}" if args.sweep else "")
                results.setdefault(key, []).append(res)
                extras[key] = dict(point, kind=kind)
                report(r, args.repeats, key, res)
            batches.close()
            if on_gpu:
                torch.cuda.synchronize(device)
            del batches, iterator, pipe
            gc.collect()
        if resident is not None:
            x, y = resident
            res = time_training(args, step, iter(lambda: (x, y), None), device, "gpu_resident")
            results.setdefault("gpu_resident", []).append(res)
            extras["gpu_resident"] = dict(decoder=None, threads=None, hw_decoder_load=None, kind="gpu_resident")
            report(r, args.repeats, "gpu_resident", res)

    rows = [summarise(name, results[name], extras[name], args) for name in results]
    n_images = sum(len(os.listdir(os.path.join(args.train_root, c))) for c in classes)
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "implementation": "dali",
            "dali": dali.__version__, "torch": torch.__version__, "torchvision": torchvision.__version__,
            "gpu": torch.cuda.get_device_name(device) if on_gpu else None, "cpu_cores": os.cpu_count(),
            "dataset": args.train_root, "train_images": n_images, "classes": len(classes),
            "largest_image_sampled": list(hint), "image_size": args.image_size, "batch_size": args.batch_size,
            "precision": args.precision, "channels_last": args.channels_last, "dali_output_dtype": args.dtype,
            "output_layout": "HWC" if args.channels_last else "CHW", "prefetch_queue_depth": args.prefetch_queue_depth,
            "points": [list(p) for p in args.points], "sweep": args.sweep, "modes": args.modes,
            "pipeline": "built per point and repeat, deleted after its measurement; model and optimiser shared",
            "warmup_steps": args.warmup, "steps": args.steps, "repeats": args.repeats, "seed": args.seed,
            "compile": args.compile,
            "compile_mode": args.compile_mode if args.compile else None,
            "compiled": f"model (forward, backward), {args.compile_mode} mode; loss and SGD step eager"
            if args.compile else None,
            "compile_warmup_steps": COMPILE_WARMUP_STEPS if args.compile else 0, "compile_s": compile_s}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    print(f"written to {args.out}")
    if args.plot:
        try:
            plot_curve(rows, args.plot, pinfeed_curve(args.pinfeed_bench))
        except ImportError:
            print("matplotlib missing: no chart", file=sys.stderr)
    return 0


def report(r, repeats, name, res):
    idle = "n/a" if res["gpu_idle"] is None else f"{100 * res['gpu_idle']:.1f}%"
    print(f"repeat {r + 1}/{repeats} {name}: {res['samples_per_s']:.1f} samples/s, wait p50 {res['wait_ms_p50']:.3f} ms, "
          f"GPU idle {idle}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

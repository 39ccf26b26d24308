#!/usr/bin/env python3
"""What nvJPEG's per-image repack costs a training step running beside it: its launches or its pixels
(docs/resolution-schedule.md#where-the-missing-share-goes-at-160-and-128-px).

torchvision's ResNet-50 training step (autocast, channels_last, SGD momentum) captured as one CUDA graph on a
resident batch, in bf16 or fp16 autocast (no loss scaling: the timing is the same, the gradients are not used);
the JSON names the step's BatchNorm kernels (bf16 runs ATen's; pinfeed's fused step runs cuDNN's persistent NHWC
ones). Each step, a second graph replayed on a side stream stands in for one batch's repack:
  none      no side work (the ceiling)
  tiny      K launches of a one-block kernel (the launches alone)
  perimage  K launches, each repacking one image's RGBA crop to RGB (what nvJPEG's hardware path does)
  batched   one launch repacking the same K images (the same bytes in one kernel)
  spread    perimage in 16 groups with a one-block spin between them: the launches spread over the step, as the
            engines finish images, not all at its start
  spread_tiny, spins   the same with one-block kernels instead of repacks, and the spins alone (what spread's own
            spacing costs)
Rows interleave for --rounds; the JSON has every row's samples/s and the side graph's time alone.
    python3 scripts/probe_side_launches.py --size 160 --precision fp16 --rounds 3 --out probe.json
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--precision", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--images", type=int, default=256, help="side launches per step (one per image)")
    p.add_argument("--crop", default="280x270", help="each image's decoded region, WxH (a mean RandomResizedCrop)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--gap-cycles", type=int, default=2_000_000,
                   help="spread: a one-block spin of this many clocks after every 16 images (spreads them over the step)")
    p.add_argument("--out", required=True)
    return p.parse_args()


def capture(fn, stream):
    """fn's kernels as a CUDA graph on `stream`, after three eager runs there (allocator and cuDNN warm)."""
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        fn()
    return g


def main():
    a = parse_args()
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5, foreach=True)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(1000, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16 if a.precision == "bf16" else torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    main_stream, side = torch.cuda.Stream(), torch.cuda.Stream()
    step_graph = capture(step, main_stream)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    norm_kernels = sorted({e.name[:120] for e in prof.events()
                           if "norm" in e.name.lower() and str(e.device_type).endswith("CUDA")})

    w, h = (int(v) for v in a.crop.split("x"))
    rgba = torch.randint(0, 255, (a.images, h, w, 4), device=dev, dtype=torch.uint8)
    rgb = torch.empty(a.images, h, w, 3, device=dev, dtype=torch.uint8)
    dot = torch.zeros(a.images, device=dev)
    sides = {
        "none": None,
        "tiny": lambda: [dot[i:i + 1].add_(1) for i in range(a.images)],
        "perimage": lambda: [rgb[i].copy_(rgba[i, :, :, :3]) for i in range(a.images)],
        "batched": lambda: rgb.copy_(rgba[:, :, :, :3]),
        "spread": lambda: [(rgb[i].copy_(rgba[i, :, :, :3]), i % 16 == 15 and torch.cuda._sleep(a.gap_cycles))
                           for i in range(a.images)],
        "spread_tiny": lambda: [(dot[i:i + 1].add_(1), i % 16 == 15 and torch.cuda._sleep(a.gap_cycles))
                                for i in range(a.images)],
        "spins": lambda: [torch.cuda._sleep(a.gap_cycles) for _ in range(a.images // 16)],
    }
    graphs = {k: (capture(f, side) if f else None) for k, f in sides.items()}

    def alone(g, n=50):  # the side graph's own time, nothing beside it
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            g.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e3

    def rate(g):
        for _ in range(10):
            step_graph.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            started = torch.cuda.Event()
            with torch.cuda.stream(main_stream):
                started.record()  # the previous step done: this one starts now
                step_graph.replay()
            if g is not None:  # paced: one side replay per step, beginning with its step
                with torch.cuda.stream(side):
                    side.wait_event(started)
                    g.replay()
        torch.cuda.synchronize()
        return a.batch * a.steps / (time.perf_counter() - t0)

    result = {"size": a.size, "batch": a.batch, "precision": a.precision, "images": a.images, "crop": a.crop,
              "norm_kernels": norm_kernels, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "side_ms_alone": {}, "rows": {k: [] for k in sides}}
    with torch.cuda.stream(side):
        for k, g in graphs.items():
            if g is not None:
                result["side_ms_alone"][k] = round(alone(g), 4)
    for r in range(a.rounds):
        for k, g in graphs.items():
            result["rows"][k].append(round(rate(g), 1))
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in result["rows"].items()), flush=True)
    base = statistics.mean(result["rows"]["none"])
    step_ms = a.batch / base * 1e3
    result["summary"] = {k: {"samples_s": round(statistics.mean(v), 1), "share": round(statistics.mean(v) / base, 4),
                             "lost_ms_per_step": round(a.batch / statistics.mean(v) * 1e3 - step_ms, 3)}
                         for k, v in result["rows"].items()}
    print(json.dumps(result["summary"], indent=1), "side alone (ms):", result["side_ms_alone"])
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where a compiled PyTorch loop fed by pinfeed's module loses time: bench_python_feed.py's step and rows, in one
process at one size, in the order --rows gives (docs/python-module.md#where-the-loop-loses-time):
  res      the step on a resident batch (the ceiling; run it between the others to see its drift)
  pfT      pinfeed.ImageFolderLoader, nvJPEG, T CPU threads (pf2, pf4)
  burnK    the resident step beside K processes that each keep a core busy (burn2, burn4): does CPU load slow it?
  pin      pf2 with the loop's thread alone on one core, the loader's threads on the others
  prof     torch.profiler over 8 steps, resident then pf2: each CUDA runtime call's count and mean CPU time a step
  gaps     torch.profiler over 8 resident steps, read by scripts/trace_gaps.py and trace_kernels.py: the step's stream
           idle between its kernels, the largest gaps, kernel time (no pinfeed import when the rows need no loader)
    python scripts/probe_python_loop.py --root DATA/train --out probe.json --rows res,pf2,burn2,pin,res,prof
"""
import argparse
import gc
import json
import os
import subprocess
import sys

import bench_python_feed as bench


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--rows", default="res,pf2,burn2,pin,pf4,res,prof")
    p.add_argument("--compile-mode", default="reduce-overhead")
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    args = bench.parse_args(["--root", a.root, "--out", a.out, "--sizes", str(a.size), "--compile-mode",
                             a.compile_mode, "--steps", str(a.steps)])
    return a, args


def siblings(cpu):
    """The logical CPUs sharing `cpu`'s core (itself alone without SMT)."""
    out = set()
    with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def main():
    a, args = parse_args()
    if any(r.startswith(("pf", "pin", "prof")) for r in a.rows.split(",")):
        import pinfeed  # noqa: F401  before CUDA starts (its hardware queues)
    import torch
    from reference_pytorch import compile_warmup
    device = torch.device("cuda", torch.cuda.current_device())
    step, classes = bench.make_step(args, device)  # and args.warmup: past the loader's first pass
    x = torch.randn(args.batch_size, 3, a.size, a.size, device=device, dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(len(classes), (args.batch_size,), device=device)
    print(f"compiling took {compile_warmup(step, x, y, device):.1f} s", flush=True)
    resident = lambda: (iter(lambda: (x, y), None), lambda: None)  # noqa: E731
    loader = lambda t: lambda: bench.pinfeed_feed(args, a.size, t, "nvjpeg", device)  # noqa: E731
    rows = []

    def row(name, make, burn=0, pin=False):
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burn)]
        cpus = os.sched_getaffinity(0)
        core = max(cpus)
        if pin:  # the loader's threads inherit a mask without the loop's core; then the loop's thread takes it
            os.sched_setaffinity(0, cpus - siblings(core))
        batches, close = make()
        if pin:
            os.sched_setaffinity(0, {core})
        try:
            r = bench.run_row(args, step, batches, device, name)
        finally:
            close()
            torch.cuda.synchronize(device)
            gc.collect()
            for b in burners:
                b.kill()
            os.sched_setaffinity(0, cpus)
        rows.append(dict(row=name, burners=burn, pinned=pin, **r))
        print(f"{name:<30} {r['samples_per_s']:8.1f} samples/s, step {r['step_ms']:.2f} ms, loop thread "
              f"{r['loop_thread_cpu_ms_per_step']:.2f} ms CPU, wait p50 {r['wait_ms_p50']:.2f} ms", flush=True)

    def profile(name, make, steps=8):
        from torch.profiler import ProfilerActivity, profile as torch_profile
        batches, close = make()
        for _ in range(args.warmup):
            step(*next(batches))
        torch.cuda.synchronize(device)
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step(*next(batches))
            torch.cuda.synchronize(device)
        close()
        gc.collect()
        calls = {e.key: {"per_step": e.count / steps, "cpu_us_mean": e.cpu_time_total / e.count,
                         "self_cpu_ms_per_step": e.self_cpu_time_total / steps / 1e3}
                 for e in prof.key_averages() if e.key.startswith("cu") and e.cpu_time_total > 0}
        rows.append({"row": "profile " + name, "calls": calls})
        print(f"profile {name}:")
        for key, c in sorted(calls.items(), key=lambda kv: -kv[1]["self_cpu_ms_per_step"])[:8]:
            print(f"  {key:<24} {c['per_step']:6.0f} a step, {c['cpu_us_mean']:6.2f} us each")

    def gaps(steps=8):
        from trace_gaps import gaps as trace_gaps
        from trace_kernels import kernel_times
        events = bench.traced_steps(step, x, y, device, steps)
        g, k = trace_gaps(events), kernel_times(events)
        rows.append({"row": "gaps", "gaps": g, "gpu_ms_per_step": k["gpu_ms_per_step"],
                     "kernels_per_step": k["kernels_per_step"]})
        print(f"gaps: {g['window']:.2f} ms a step, kernels {k['gpu_ms_per_step']:.2f} ms, the step's stream idle "
              f"between them {g['gaps']:.2f} ms; largest gaps (us, the kernel that waited):", flush=True)
        for us, name in g["largest"]:
            print(f"  {us:8.1f} {name}")

    for r in a.rows.split(","):
        if r == "gaps":
            gaps()
        elif r == "res":
            row("resident", resident)
        elif r.startswith("pf"):
            row(f"pinfeed, {r[2:]} threads", loader(int(r[2:])))
        elif r.startswith("burn"):
            row(f"resident beside {r[4:]} busy cores", resident, burn=int(r[4:]))
        elif r == "pin":
            row("pinfeed, 2 threads, loop pinned", loader(2), pin=True)
        elif r == "prof":
            profile("resident", resident)
            profile("pinfeed", loader(2))
        else:
            sys.exit(f"unknown row {r!r}")
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(device), "cpu_cores": os.cpu_count(),
            "smt_siblings_of_cpu0": sorted(siblings(0)), "size": a.size, "compile_mode": a.compile_mode,
            "batch_size": args.batch_size, "steps": args.steps, "warmup_steps": args.warmup, "dataset": args.train_root,
            "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

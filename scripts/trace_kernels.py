#!/usr/bin/env python3
"""Where a traced step's GPU time goes: kernel time per step by kind and by kernel, from a pinfeed trace.

Usage: scripts/trace_kernels.py TRACE.json[.gz] [--top N]

TRACE.json is what `pinfeed bench --trace-steps A-B` or `pinfeed train` (run.trace_steps) writes (Kineto's Chrome
trace; scripts/trace_idle.py says more). Each kernel is put in one kind by its name: "batchnorm" (cuDNN's and
ATen's BatchNorm kernels), "conv/gemm" (cuDNN's convolutions, cuBLAS and CUTLASS matrix products and their
helpers), "other" (elementwise, pooling, loss, optimizer, casts). The times are sums of kernel durations divided by
the number of traced steps (the "pinfeed::step" ranges): kernels that overlap count twice, so the total can exceed
a step's wall time on a GPU that runs kernels concurrently. Standard library only.
"""
import argparse
import collections

from trace_idle import load

CONV_MARKS = ("conv", "gemm", "xmma", "cutlass", "nvjet", "implicit", "dgrad", "wgrad", "fprop", "cask_", "Padding")


def kind(name):
    if "atchnorm" in name or "batch_norm" in name:
        return "batchnorm"
    if any(m in name for m in CONV_MARKS):
        return "conv/gemm"
    return "other"


def kernel_times(events):
    """A trace's kernels per step: {"steps", "kernels_per_step", "gpu_ms_per_step", "by_kind": {kind: ms},
    "kernels": {name: [calls, ms]}}, longest first (calls and ms per step)."""
    steps = max(1, sum(1 for e in events if e.get("name") == "pinfeed::step" and e.get("ph") == "X"
                       and e.get("cat") != "gpu_user_annotation"))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_name, count, by_kind = collections.Counter(), collections.Counter(), collections.Counter()
    for e in kernels:
        by_name[e["name"]] += e["dur"]
        count[e["name"]] += 1
        by_kind[kind(e["name"])] += e["dur"]
    return {"steps": steps, "kernels_per_step": len(kernels) // steps,
            "gpu_ms_per_step": sum(by_kind.values()) / steps / 1000,
            "by_kind": {k: us / steps / 1000 for k, us in by_kind.most_common()},
            "kernels": {name: [count[name] // steps, us / steps / 1000] for name, us in by_name.most_common()}}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=30, help="kernels listed, longest total first")
    args = p.parse_args()
    t = kernel_times(load(args.trace)["traceEvents"])
    total = t["gpu_ms_per_step"]
    print(f"{t['steps']} step(s); kernel time per step {total:.2f} ms, {t['kernels_per_step']} kernels")
    for k, ms in t["by_kind"].items():
        print(f"  {k:10s} {ms:7.2f} ms  {100 * ms / total:5.1f}%")
    print("per step     calls  kind       kernel")
    for name, (calls, ms) in list(t["kernels"].items())[:args.top]:
        print(f"{ms:7.3f} ms {calls:5d}x  {kind(name):10s} {name[:100]}")


if __name__ == "__main__":
    main()

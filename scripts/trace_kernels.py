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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=30, help="kernels listed, longest total first")
    args = p.parse_args()
    events = load(args.trace)["traceEvents"]
    steps = max(1, sum(1 for e in events if e.get("name") == "pinfeed::step" and e.get("ph") == "X"
                       and e.get("cat") != "gpu_user_annotation"))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_name, count, by_kind = collections.Counter(), collections.Counter(), collections.Counter()
    for e in kernels:
        by_name[e["name"]] += e["dur"]
        count[e["name"]] += 1
        by_kind[kind(e["name"])] += e["dur"]
    total = sum(by_kind.values())
    print(f"{steps} step(s); kernel time per step {total / steps / 1000:.2f} ms, {len(kernels) // steps} kernels")
    for k, us in by_kind.most_common():
        print(f"  {k:10s} {us / steps / 1000:7.2f} ms  {100 * us / total:5.1f}%")
    print("per step     calls  kind       kernel")
    for name, us in by_name.most_common(args.top):
        print(f"{us / steps / 1000:7.3f} ms {count[name] // steps:5d}x  {kind(name):10s} {name[:100]}")


if __name__ == "__main__":
    main()

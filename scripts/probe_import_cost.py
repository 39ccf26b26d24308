#!/usr/bin/env python3
"""Does `import pinfeed` slow a compiled PyTorch step? (docs/python-module.md#in-a-pytorch-loop)

Runs scripts/bench_python_feed.py's resident rows alone (its step on one batch kept on the GPU, no feed rows) in
fresh processes that alternate: `without` never imports pinfeed (--feeds=), `with` imports it before CUDA starts as
a user's loop would (--feeds pinfeed --threads=: the import, no loader). Both in this process's environment, with
CUDA_DEVICE_MAX_CONNECTIONS as `import pinfeed` sets it (32) unless the caller set it, so that only the import
differs. Prints each process's rows and the ratio of the medians; --out keeps every process's JSON.
    python3 scripts/probe_import_cost.py --root DATA/train --rounds 2 --sizes 160 --out probe.json
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
VARIANTS = {"without": ["--feeds="], "with": ["--feeds", "pinfeed", "--threads="]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="ImageFolder split (its classes size the model's last layer)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--rounds", type=int, default=2, help="processes of each variant, alternating")
    p.add_argument("--sizes", default="160")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test (eager step)")
    p.add_argument("--bare-ld-library-path", default=None,
                   help="adds the variant `without-bare`: no import, LD_LIBRARY_PATH set to this ('' unsets it)")
    return p.parse_args(argv)


def run(a, variant, tmp, index):
    out = pathlib.Path(tmp) / f"{variant}-{index}.json"
    cmd = [sys.executable, str(HERE / "bench_python_feed.py"), "--root", a.root, "--out", str(out), "--sizes",
           a.sizes, "--warmup", str(a.warmup), "--steps", str(a.steps), "--device", a.device, "--kernel-profile",
           *VARIANTS[variant.replace("-bare", "")]]
    if a.device == "cpu":
        cmd.append("--no-compile")
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    if variant.endswith("-bare"):
        env.pop("LD_LIBRARY_PATH", None)
        if a.bare_ld_library_path:
            env["LD_LIBRARY_PATH"] = a.bare_ld_library_path
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{variant} process {index} failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    result = json.loads(out.read_text())
    return {"variant": variant, "process": index, "ld_library_path": env.get("LD_LIBRARY_PATH"),
            "meta": result["meta"],
            "rows": [{k: row[k] for k in ("image_size", "samples_per_s", "gpu_idle", "loop_thread_cpu_ms_per_step",
                                         "step_ms")} for row in result["rows"]]}


def kernel_differences(processes, variants, size, top=8):
    """The kernels whose mean GPU ms a step differ most between the first two variants, at one size."""
    mean = {}
    for v in variants:
        profiles = [p["meta"]["kernels_by_size"].get(str(size), {}).get("kernels") for p in processes
                    if p["variant"] == v]
        profiles = [k for k in profiles if k]
        if not profiles:
            return []
        names = set().union(*profiles)
        mean[v] = {n: sum(k.get(n, [0, 0.0])[1] for k in profiles) / len(profiles) for n in names}
    a, b = variants[:2]
    names = set(mean[a]) | set(mean[b])
    diff = sorted(((mean[a].get(n, 0.0) - mean[b].get(n, 0.0), n) for n in names), key=lambda d: -abs(d[0]))
    return [{"kernel": n, f"ms_{a}": mean[a].get(n, 0.0), f"ms_{b}": mean[b].get(n, 0.0), "difference_ms": d}
            for d, n in diff[:top]]


def main(argv=None):
    a = parse_args(argv)
    variants = list(VARIANTS) + (["without-bare"] if a.bare_ld_library_path is not None else [])
    processes = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for variant in variants:
                processes.append(run(a, variant, tmp, i))
                rates = ", ".join(f"{r['image_size']} px {r['samples_per_s']:.1f}" for r in processes[-1]["rows"])
                print(f"{variant:<8} process {i}: {rates} samples/s", flush=True)
    summary = {}
    for size in sorted({r["image_size"] for p in processes for r in p["rows"]}):
        med = {v: statistics.median(r["samples_per_s"] for p in processes if p["variant"] == v for r in p["rows"]
                                    if r["image_size"] == size) for v in variants}
        summary[size] = {**{f"median_{v}": m for v, m in med.items()},
                         "with_over_without": med["with"] / med["without"],
                         "kernels_with_against_without": kernel_differences(processes, ["with", "without"], size)}
        if "without-bare" in med:
            summary[size]["without_over_without_bare"] = med["without"] / med["without-bare"]
        print(f"{size} px: with / without = {med['with']:.1f} / {med['without']:.1f} = "
              f"{summary[size]['with_over_without']:.3f}" + (f"; without / without-bare = "
              f"{summary[size]['without_over_without_bare']:.3f}" if "without-bare" in med else ""))
        for d in summary[size]["kernels_with_against_without"]:
            print(f"  {d['difference_ms']:+.3f} ms a step ({d['ms_with']:.3f} with, {d['ms_without']:.3f} without) "
                  f"{d['kernel'][:90]}")
    with open(a.out, "w") as f:
        json.dump({"environment": {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "LD_LIBRARY_PATH")},
                   "processes": processes, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

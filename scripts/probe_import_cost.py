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
    return p.parse_args(argv)


def run(a, variant, tmp, index):
    out = pathlib.Path(tmp) / f"{variant}-{index}.json"
    cmd = [sys.executable, str(HERE / "bench_python_feed.py"), "--root", a.root, "--out", str(out), "--sizes",
           a.sizes, "--warmup", str(a.warmup), "--steps", str(a.steps), "--device", a.device, *VARIANTS[variant]]
    if a.device == "cpu":
        cmd.append("--no-compile")
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{variant} process {index} failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    result = json.loads(out.read_text())
    return {"variant": variant, "process": index, "meta": result["meta"],
            "rows": [{k: row[k] for k in ("image_size", "samples_per_s", "gpu_idle", "loop_thread_cpu_ms_per_step",
                                         "step_ms")} for row in result["rows"]]}


def main(argv=None):
    a = parse_args(argv)
    processes = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for variant in VARIANTS:
                processes.append(run(a, variant, tmp, i))
                rates = ", ".join(f"{r['image_size']} px {r['samples_per_s']:.1f}" for r in processes[-1]["rows"])
                print(f"{variant:<8} process {i}: {rates} samples/s", flush=True)
    summary = {}
    for size in sorted({r["image_size"] for p in processes for r in p["rows"]}):
        med = {v: statistics.median(r["samples_per_s"] for p in processes if p["variant"] == v for r in p["rows"]
                                    if r["image_size"] == size) for v in VARIANTS}
        summary[size] = {**{f"median_{v}": m for v, m in med.items()}, "with_over_without": med["with"] / med["without"]}
        print(f"{size} px: with / without = {med['with']:.1f} / {med['without']:.1f} = "
              f"{summary[size]['with_over_without']:.3f}")
    with open(a.out, "w") as f:
        json.dump({"environment": {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "LD_LIBRARY_PATH")},
                   "processes": processes, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

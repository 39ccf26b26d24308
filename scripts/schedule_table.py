#!/usr/bin/env python3
"""The per-epoch table of a scheduled run (scripts/bench_schedule.sh): each epoch's side, samples/s, its share of
that side's ceiling (the gpu_resident row of `pinfeed bench` at that side, median of its repeats), wait, capture
time and epoch time (evaluation included); then the run's wall time against the sum over epochs of
images / ceiling(side) plus the evaluation time.

    schedule_table.py --metrics RUN/metrics.jsonl --ceilings BENCH.json [...] --train-images N [--wall-s S] [--json OUT]

The ideal run trains every epoch's images at its side's ceiling and evaluates as the run did (eval_s); the
difference holds the warm-up steps, the switches (capture_s) and every wait. Standard library only.
"""
import argparse
import json
import statistics


def ceilings(paths):
    out = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        rows = {r["mode"]: r for r in doc["rows"]}
        if "gpu_resident" not in rows:
            raise SystemExit(f"{path}: needs a gpu_resident row")
        values = [v for v in rows["gpu_resident"]["samples_per_s"] if v is not None]
        out[doc["meta"]["image_size"]] = statistics.median(values)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics", required=True)
    p.add_argument("--ceilings", nargs="+", required=True)
    p.add_argument("--train-images", type=int, required=True, help="training images per epoch (the whole set)")
    p.add_argument("--wall-s", type=float, help="the run's wall time, process start to end")
    p.add_argument("--json")
    a = p.parse_args()
    ceiling = ceilings(a.ceilings)
    with open(a.metrics) as f:
        epochs = [json.loads(line) for line in f if line.strip()]
    print("| epoch | px | samples/s | % of the side's ceiling | wait ms mean / p95 | graph capture s | eval s | epoch s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    table, ideal, total = [], 0.0, 0.0
    for e in epochs:
        side = e["image_size"]
        if side not in ceiling:
            raise SystemExit(f"epoch {e['epoch']} trained at {side} px: no ceiling for it in {a.ceilings}")
        rate, c = e["samples_per_s"], ceiling[side]
        eval_s = e.get("eval_s") or 0.0
        ideal += a.train_images / c + eval_s
        total += e["epoch_s"]
        capture = e.get("capture_s")
        print(f"| {e['epoch']} | {side} | {rate:,.0f} | {100 * rate / c:.1f}% ({c:,.0f}) | "
              f"{e['wait_ms_mean']:.2f} / {e['wait_ms_p95']:.2f} | {'n/a' if capture is None else f'{capture:.2f}'} | "
              f"{eval_s:.2f} | {e['epoch_s']:.2f} |")
        table.append({"epoch": e["epoch"], "image_size": side, "samples_per_s": rate, "ceiling": c,
                      "share_of_ceiling": rate / c, "wait_ms_mean": e["wait_ms_mean"], "wait_ms_p95": e["wait_ms_p95"],
                      "capture_s": capture, "epoch_s": e["epoch_s"], "eval_s": eval_s})
    summary = {"epochs_s": total, "ideal_s": ideal, "epochs_over_ideal": total / ideal}
    line = f"\nepochs {total:.1f} s against {ideal:.1f} s at every side's ceiling with the same evaluations " \
           f"({100 * (total / ideal - 1):+.1f}%)"
    if a.wall_s:
        summary["wall_s"] = a.wall_s
        line += f"; the whole process {a.wall_s:.1f} s (start-up and checkpoints included)"
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"epochs": table, "summary": summary, "ceilings": ceiling}, f, indent=1)


if __name__ == "__main__":
    main()

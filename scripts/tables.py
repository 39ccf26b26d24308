#!/usr/bin/env python3
"""Every table the bench and accuracy scripts print, one sub-command each, from the JSON files they write:

  step      the training step against its Python peers           scripts/bench_step.sh
  fusion    the cuDNN frontend fusions, layer by layer             scripts/bench_step.sh --fusion
  feed      the feed from JPEG files against its ceiling and DALI  scripts/bench_feed.sh
  schedule  a scheduled run, epoch by epoch, against each side's ceiling   scripts/bench_feed.sh --schedule
  modes     every transfer mode, pinfeed and Python                scripts/bench_feed.sh --modes
  tta       time to accuracy: the table, and the curves' chart     scripts/time_to_accuracy.sh
  parity    accuracy parity: the table, the chart and the verdict  scripts/time_to_accuracy.sh --parity

    scripts/tables.py SUB-COMMAND [options]     (scripts/tables.py SUB-COMMAND --help: its inputs and figures)

Standard library only; the two charts need matplotlib.
"""
import argparse
import json
import math
import os
import statistics
import sys


def parser(name, doc):
    return argparse.ArgumentParser(prog=f"tables.py {name}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


# ---- step ----------------------------------------------------------------------------------------

STEP_DOC = """The training step's comparison table from bench JSON files: `pinfeed bench` (bench.json) and the
Python peers (scripts/reference_pytorch.py, reference_dali.py), one gpu_resident row each (the batch already on the
GPU: the compute ceiling), as scripts/bench_step.sh writes them.

    tables.py step --base LABEL LABEL=FILE [LABEL=FILE ...] [--json OUT]

Prints a Markdown table: samples/s median over the repeats [min-max], and each row's median over --base's.
"""


def step_gpu_resident(path):
    with open(path) as f:
        doc = json.load(f)
    for row in doc["rows"]:
        if row["mode"] == "gpu_resident":
            values = [v for v in row["samples_per_s"] if v is not None]
            return doc.get("meta", {}), values
    sys.exit(f"{path}: no gpu_resident row")


def step_cell(row):
    """A row's samples/s as the tables write it: median [min-max]."""
    return f"{row['median']:,.0f} [{row['min']:,.0f}-{row['max']:,.0f}]"


def step_main(argv):
    p = parser("step", STEP_DOC)
    p.add_argument("rows", nargs="+", metavar="LABEL=FILE")
    p.add_argument("--base", required=True, help="the label the ratios are taken against")
    p.add_argument("--json", help="also write the table's numbers here")
    args = p.parse_args(argv)
    table = []
    for item in args.rows:
        label, eq, path = item.partition("=")
        if not eq:
            sys.exit(f"expected LABEL=FILE, got {item!r}")
        meta, values = step_gpu_resident(path)
        table.append({"label": label, "file": path, "median": statistics.median(values), "min": min(values),
                      "max": max(values), "repeats": len(values), "precision": meta.get("precision"),
                      "batch_size": meta.get("batch_size"), "image_size": meta.get("image_size")})
    base = next((r for r in table if r["label"] == args.base), None)
    if base is None:
        sys.exit(f"--base {args.base!r} is not one of the labels")
    print("| training step | batch | samples/s, median [min-max] | vs " + args.base + " |")
    print("| --- | --- | --- | --- |")
    for r in table:
        r["ratio"] = r["median"] / base["median"]
        print(f"| {r['label']} | {r['batch_size']} | {step_cell(r)} | {r['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": args.base, "rows": table}, f, indent=2)


# ---- feed ----------------------------------------------------------------------------------------

FEED_DOC = """The feed's comparison table from the JSON files scripts/bench_feed.sh writes: pinfeed's nvJPEG feed
(`pinfeed bench --modes dual_stream,gpu_resident`, one bench.json per point) against its own ceiling and against
DALI + torch.compile: scripts/reference_dali.py --sweep (one JSON per image size), or the DALI rows of
scripts/bench_python_feed.py (--loop: its loop, the resident ceiling around each row, its compile mode).

    tables.py feed --pinfeed FILE [FILE ...] [--dali FILE [FILE ...]] [--loop FILE [FILE ...]] [--json OUT]

Per point (image size, CPU threads): pinfeed's dual_stream samples/s, median over the repeats [min-max], its share
of the gpu_resident row of the same bench, images per CPU thread, the decode alone (the loader_only row: GPU
decode, no step; n/a where the bench had none), DALI's best hw_decoder_load at the same threads, and the ratio of
the medians. A point DALI did not run shows n/a.
"""


def feed_spread(values):
    values = [v for v in values if v is not None]
    return statistics.median(values), min(values), max(values)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def feed_pinfeed_points(paths):
    points = {}
    for path in paths:
        doc = load_json(path)
        meta = doc["meta"]
        rows = {r["mode"]: r for r in doc["rows"]}
        if "dual_stream" not in rows or "gpu_resident" not in rows:
            raise SystemExit(f"{path}: needs a dual_stream and a gpu_resident row")
        feed = feed_spread(rows["dual_stream"]["samples_per_s"])
        ceiling = feed_spread(rows["gpu_resident"]["samples_per_s"])
        decode = feed_spread(rows["loader_only"]["samples_per_s"]) if "loader_only" in rows else None
        points[(meta["image_size"], meta["workers"])] = {"feed": feed, "ceiling": ceiling, "decode": decode}
    return points


def feed_dali_points(paths):
    best = {}
    for path in paths:
        doc = load_json(path)
        size = doc["meta"]["image_size"]
        mode = doc["meta"].get("compile_mode") or "default"  # files from before the key ran the default mode
        for row in doc["rows"]:
            if row.get("threads") is None:
                continue  # the gpu_resident row
            value = feed_spread(row["samples_per_s"])
            key = (size, row["threads"])
            if key not in best or value[0] > best[key]["value"][0]:
                best[key] = {"value": value, "load": row.get("hw_decoder_load"), "mode": mode}
    return best


def feed_loop_points(paths):
    best = {}
    for path in paths:
        doc = load_json(path)
        for row in doc["rows"]:
            if not row["feed"].startswith("dali_mixed"):
                continue
            key, value = (row["image_size"], row["threads"]), row["samples_per_s"]
            if key not in best or value > best[key]["value"][0]:
                best[key] = {"value": (value, value, value), "load": float(row["feed"].rsplit("_", 1)[1]),
                             "mode": doc["meta"]["compile_mode"]}
    return best


def feed_main(argv):
    p = parser("feed", FEED_DOC)
    p.add_argument("--pinfeed", nargs="+", required=True)
    p.add_argument("--dali", nargs="*", default=[])
    p.add_argument("--loop", nargs="*", default=[], help="bench_python_feed.py JSON: DALI's rows (over --dali's)")
    p.add_argument("--json", help="also write the table's figures here")
    a = p.parse_args(argv)
    ours, theirs = feed_pinfeed_points(a.pinfeed), {**feed_dali_points(a.dali), **feed_loop_points(a.loop)}
    print("| px | CPU threads | pinfeed nvJPEG | % of pinfeed's ceiling | per CPU thread | decode alone "
          "| DALI + `torch.compile` (best load) | pinfeed / DALI |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    table = []
    for size, threads in sorted(ours, key=lambda k: (-k[0], k[1])):
        o = ours[(size, threads)]
        (m, lo, hi), ceiling = o["feed"], o["ceiling"][0]
        d = theirs.get((size, threads))
        dali_text, ratio_text, ratio = "n/a", "n/a", None
        if d:
            dm, dlo, dhi = d["value"]
            dali_text = f"{dm:,.0f} [{dlo:,.0f}-{dhi:,.0f}] ({d['load']})"
            ratio = m / dm
            ratio_text = f"**{ratio:.2f}x**"
        decode = o["decode"]
        decode_text = f"{decode[0]:,.0f}" if decode else "n/a"
        print(f"| {size} | {threads} | {m:,.0f} [{lo:,.0f}-{hi:,.0f}] | {100 * m / ceiling:.1f}% ({ceiling:,.0f}) "
              f"| {m / threads:,.0f} | {decode_text} | {dali_text} | {ratio_text} |")
        table.append({"image_size": size, "threads": threads, "pinfeed": [m, lo, hi], "ceiling": ceiling,
                      "share_of_ceiling": m / ceiling, "per_thread": m / threads,
                      "decode_alone": decode[0] if decode else None, "dali": d["value"] if d else None,
                      "dali_hw_decoder_load": d["load"] if d else None,
                      "dali_compile_mode": d["mode"] if d else None, "pinfeed_over_dali": ratio})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)


# ---- schedule ------------------------------------------------------------------------------------

SCHEDULE_DOC = """The per-epoch table of a scheduled run (scripts/bench_feed.sh --schedule): each epoch's side,
samples/s, its share of that side's ceiling (the gpu_resident row of `pinfeed bench` at that side, median of its
repeats), wait, capture time and epoch time (evaluation included); then the run's wall time against the sum over
epochs of images / ceiling(side) plus the evaluation time.

    tables.py schedule --metrics RUN/metrics.jsonl --ceilings BENCH.json [...] --train-images N [--wall-s S]
                       [--json OUT]

The ideal run trains every epoch's images at its side's ceiling and evaluates as the run did (eval_s); the
difference holds the warm-up steps, the switches (capture_s) and every wait.
"""


def schedule_ceilings(paths):
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


def schedule_main(argv):
    p = parser("schedule", SCHEDULE_DOC)
    p.add_argument("--metrics", required=True)
    p.add_argument("--ceilings", nargs="+", required=True)
    p.add_argument("--train-images", type=int, required=True, help="training images per epoch (the whole set)")
    p.add_argument("--wall-s", type=float, help="the run's wall time, process start to end")
    p.add_argument("--json")
    a = p.parse_args(argv)
    ceiling = schedule_ceilings(a.ceilings)
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


# ---- fusion --------------------------------------------------------------------------------------

FUSION_DOC = """The cuDNN frontend fusions' tables (docs/training-step.md#the-cudnn-frontend-fusions) from the JSON
files of benchmarks/bench_conv_bn_fusion.cu, as scripts/bench_step.sh --fusion writes them (fusion.json).

    tables.py fusion FUSION.json [MORE.json ...] [--json OUT]

Per stage, in microseconds per step (each layer's time times its count), the forms the program compares:
  forward separate conv + pinfeed's BN (+ add) + ReLU
  forward fused   conv with the statistics in its epilogue (and, but for a block's conv1, the previous BN's
                  scale-bias-ReLU in its prologue) + finalize (+ scale-bias-add-ReLU after conv3)
  backward        the conv2 and conv3 units only: separate: dgrad + wgrad + pinfeed's BN + ReLU backward; fused
                  dgrad+dReLU+dBN-weight + dBN apply + wgrad with scale-bias-ReLU in its prologue
Then every layer's own BatchNorm, forward and backward, pinfeed's against the frontend's; the saving of the
faster pair per layer; and the better of the two changes per stage (where the first file has those times: an
earlier version of the program did not time each BN's own backward). The first file makes the tables; the others
add their savings in brackets.
"""


FUSION_STAGES = ("s1", "s2", "s3", "s4")
FUSION_SIDES = {"s1": "56x56", "s2": "28x28", "s3": "14x14", "s4": "7x7"}


FUSION_BN_TIMES = ("bn_forward_pinfeed", "bn_backward_own_pinfeed", "bn_forward_frontend", "bn_backward_own_frontend")


def fusion_need(layer, *names):
    values = [layer.get(n) for n in names]
    if any(v is None for v in values):
        sys.exit(f"{layer['layer']}: no time for {[n for n, v in zip(names, values) if v is None]}")
    return values


def fusion_per_stage(doc):
    """{stage: {fwd_today, fwd_fused, bwd_today, bwd_fused, fused_saves, and where doc has them bn_pinfeed,
    bn_frontend, bn_best_pair, frontend_bn_saves}} in us per step."""
    has_bn = all(all(n in layer for n in FUSION_BN_TIMES) for layer in doc["layers"])
    stages = {s: dict.fromkeys(("fwd_today", "fwd_fused", "bwd_today", "bwd_fused", "bn_pinfeed", "bn_frontend",
                                "bn_best_pair"), 0.0) for s in FUSION_STAGES}
    for layer in doc["layers"]:
        if "bn_backward_pinfeed" in layer:  # the earlier version's name of the unit's BN backward
            layer.setdefault("bn_backward_unit_pinfeed", layer["bn_backward_pinfeed"])
        stage, role = layer["layer"].split(".")
        n = layer["count"]
        t = stages[stage]
        conv, bn, fin = fusion_need(layer, "conv", "bn_forward_pinfeed", "bn_finalize")
        t["fwd_today"] += n * (conv + bn)
        (conv_fused,) = fusion_need(layer, "conv_genstats" if role == "conv1" else "sbr_conv_genstats")
        (sbar,) = fusion_need(layer, "scale_bias_add_relu") if role == "conv3" else (0.0,)
        t["fwd_fused"] += n * (conv_fused + fin + sbar)
        if role != "conv1":
            dgrad, wgrad, bnb, ddd, apply, sbrw = fusion_need(layer, "dgrad", "wgrad", "bn_backward_unit_pinfeed",
                                                       "dgrad_drelu_dbn_weight", "dbn_apply", "sbr_wgrad")
            t["bwd_today"] += n * (dgrad + wgrad + bnb)
            t["bwd_fused"] += n * (ddd + apply + sbrw)
        if not has_bn:
            continue
        pf, pb, ff, fb = fusion_need(layer, *FUSION_BN_TIMES)
        t["bn_pinfeed"] += n * (pf + pb)
        t["bn_frontend"] += n * (ff + fb)
        t["bn_best_pair"] += n * max(0.0, (pf + pb) - (ff + fb))
    for t in stages.values():
        t["fused_saves"] = (t["fwd_today"] + t["bwd_today"]) - (t["fwd_fused"] + t["bwd_fused"])
        if has_bn:
            t["frontend_bn_saves"] = t["bn_pinfeed"] - t["bn_frontend"]
        else:
            for key in ("bn_pinfeed", "bn_frontend", "bn_best_pair"):
                del t[key]
    return stages


def fusion_total(stages, key):
    return sum(t[key] for t in stages.values())


def fusion_main(argv):
    p = parser("fusion", FUSION_DOC)
    p.add_argument("files", nargs="+", metavar="FUSION.json")
    p.add_argument("--json", help="also write the tables' numbers here")
    args = p.parse_args(argv)
    docs = []
    for path in args.files:
        with open(path) as f:
            docs.append(json.load(f))
    runs = [fusion_per_stage(d) for d in docs]
    first = runs[0]

    def bracket(key, stage=None):
        others = [fusion_total(r, key) if stage is None else r[stage][key] for r in runs[1:]]
        return " [" + " / ".join(f"{v:,.0f}" for v in others) + "]" if others else ""

    d = docs[0]
    print(f"{d['device']}, cuDNN {d['cudnn']}, cuDNN frontend {d['cudnn_frontend']}, batch {d['batch']}, "
          f"{d['precision']}, best of up to {d['max_plans']} plans per graph (us per step)\n")
    print("| stage | forward separate | forward fused | backward separate | backward fused | fused saves |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, s in enumerate(FUSION_STAGES):
        t = first[s]
        print(f"| {i + 1} ({FUSION_SIDES[s]}) | {t['fwd_today']:,.0f} | {t['fwd_fused']:,.0f} | "
              f"{t['bwd_today']:,.0f} | "
              f"{t['bwd_fused']:,.0f} | {t['fused_saves']:,.0f}{bracket('fused_saves', s)} |")
    print(f"| all | {fusion_total(first, 'fwd_today'):,.0f} | {fusion_total(first, 'fwd_fused'):,.0f} | "
          f"{fusion_total(first, 'bwd_today'):,.0f} | {fusion_total(first, 'bwd_fused'):,.0f} | "
          f"**{fusion_total(first, 'fused_saves'):,.0f}**{bracket('fused_saves')} |")
    if "bn_pinfeed" not in first["s1"]:
        return fusion_write_json(args, runs, None)
    print("\n| stage | pinfeed's BatchNorm | the frontend's | frontend saves | faster pair per layer saves | "
          "better change |")
    print("| --- | --- | --- | --- | --- | --- |")
    better_sum = 0.0
    for i, s in enumerate(FUSION_STAGES):
        t = first[s]
        better = max(t["fused_saves"], t["bn_best_pair"])
        better_sum += better
        which = "fused form" if t["fused_saves"] >= t["bn_best_pair"] else "frontend's BatchNorm"
        print(f"| {i + 1} | {t['bn_pinfeed']:,.0f} | {t['bn_frontend']:,.0f} | {t['frontend_bn_saves']:,.0f} | "
              f"{t['bn_best_pair']:,.0f} | {which}: {better:,.0f} |")
    print(f"| all | {fusion_total(first, 'bn_pinfeed'):,.0f} | {fusion_total(first, 'bn_frontend'):,.0f} | "
          f"{fusion_total(first, 'frontend_bn_saves'):,.0f} | {fusion_total(first, 'bn_best_pair'):,.0f} | "
          f"{better_sum:,.0f} |")
    fusion_write_json(args, runs, better_sum)


def fusion_write_json(args, runs, better_sum):
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": args.files, "stages": runs, "better_per_stage": better_sum}, f, indent=1)


# ---- tta -----------------------------------------------------------------------------------------

TTA_DOC = """Time to accuracy: how soon pinfeed reaches the Python stack's final top-1, seed by seed, from
per-epoch files (scripts/time_to_accuracy.sh).

    tables.py tta --pinfeed p0.jsonl p1.jsonl ... --python r0.jsonl r1.jsonl ... [--seeds 0 1 ...]
                  [--md tta.md] [--json tta.json] [--png tta.png] [--tolerance POINTS] [--note TEXT]

Each file: one run's JSON lines, one per epoch, with val_top1 (a fraction) and a wall clock, the first of
- launch_s: seconds from the process's launch to the line (scripts/timed_run.py stamps it, the same way for both),
- wall_s: the trainer's own seconds from its start (reference_train.py writes it),
- the running sum of epoch_s (start-up and checkpoint saves left out: labelled so in the table).
The files pair up by position (the i-th of each side is seed i).

- target = the Python side's mean final top-1 (its last epoch's) - --tolerance points (default 0);
- a run's time to the target = the wall clock of its first epoch whose top-1 >= target (nothing interpolated);
  "not reached" when no epoch gets there;
- the Python side's time for the speed-up: its time to the target, or where a run ends below the target its
  whole run (the time it took to reach its own final top-1, of which the target is the mean);
- speed-up per seed = that Python time / pinfeed's time to the target; the summary gives the mean +- standard
  error over seeds of each figure (standard error = sample standard deviation / sqrt(n)) and the ratio of the
  mean times;
- the seeds' mean curves (mean top-1 and mean clock at each epoch, runs of equal epochs): the mean clock where
  each side's mean top-1 first reaches the target, and their ratio (defined where a seed falls short, too);
- the final top-1 gap (pinfeed - Python, points) with the standard error of the difference of the means, and
  whether it is within 1 point and within that standard error;
- with --images and --project, each run's time projected to another dataset's size (tta_project() says how),
  labelled as a projection.
The JSON holds every figure and each run's curve (top-1 and clock per epoch); --png draws those curves, top-1
against the clock, pinfeed solid and the Python stack dashed, a colour per seed, the target dotted.
Exit code 2 on unreadable input or unequal numbers of runs, 3 when --png cannot be drawn (matplotlib missing);
0 otherwise (the verdicts are in the table).
"""


TTA_CLOCKS = [("launch_s", "from launch (timed_run.py)"), ("wall_s", "from the trainer's start (its wall_s)"),
          (None, "sum of epoch_s (start-up excluded)")]


class InputError(Exception):
    pass


def tta_read_run(path):
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: {e}") from None
    rows = [r for r in rows if r.get("val_top1") is not None]
    if not rows:
        raise InputError(f"{path}: no epoch with val_top1")
    for key, label in TTA_CLOCKS:
        if key is None or all(r.get(key) is not None for r in rows):
            break
    if key is None:
        if not all(r.get("epoch_s") is not None for r in rows):
            raise InputError(f"{path}: an epoch has neither launch_s, wall_s nor epoch_s")
        total, walls = 0.0, []
        for r in rows:
            total += r["epoch_s"]
            walls.append(total)
    else:
        walls = [r[key] for r in rows]
    return {"path": path, "top1": [r["val_top1"] for r in rows], "wall": walls, "clock": label,
            "rates": [r.get("samples_per_s") for r in rows], "eval_s": [r.get("eval_s") for r in rows],
            "samples_per_s": statistics.median(r["samples_per_s"] for r in rows if r.get("samples_per_s"))
            if any(r.get("samples_per_s") for r in rows) else None}


def tta_time_to(run, target):
    """Wall clock of the first epoch at or above target, and that epoch (from 1); (None, None) if none is."""
    for i, top1 in enumerate(run["top1"]):
        if top1 >= target:
            return run["wall"][i], i + 1
    return None, None


def tta_project(run, images, target):
    """Seconds a run would take with target = (train, val) images instead of images = (train, val): each epoch's
    training at its own rate plus its evaluation scaled by the val images, plus the run's overhead (its last clock
    less that steady-state time: start-up, compilation, graph captures, warm-up steps, checkpoint saves), which is
    taken not to grow with the data. None where an epoch lacks a rate or an evaluation time."""
    if any(v is None for v in run["rates"] + run["eval_s"]) or not all(images):
        return None
    def steady(n_train, n_val):  # training at each epoch's rate, evaluation scaled by the val images
        return sum(n_train / r + e * n_val / images[1] for r, e in zip(run["rates"], run["eval_s"]))
    return run["wall"][-1] - steady(*images) + steady(*target)


def tta_mean_curve(runs, target):
    """The seeds' mean top-1 and mean clock at each epoch, and the mean clock of the first epoch whose mean top-1 is
    at or above target (None if none is, or if the runs differ in epochs)."""
    if len({len(r["top1"]) for r in runs}) != 1:
        return {"top1": None, "wall": None, "target_s": None, "target_epoch": None}
    top1 = [statistics.fmean(v) for v in zip(*(r["top1"] for r in runs))]
    wall = [statistics.fmean(v) for v in zip(*(r["wall"] for r in runs))]
    target_s, target_epoch = tta_time_to({"top1": top1, "wall": wall}, target)
    return {"top1": top1, "wall": wall, "target_s": target_s, "target_epoch": target_epoch}


def tta_mean_se(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def tta_summarise(pinfeed, python, seeds, tolerance, images=None, target_images=None):
    finals_py = [r["top1"][-1] for r in python]
    target = statistics.fmean(finals_py) - tolerance / 100
    rows = []
    for seed, pf, py in zip(seeds, pinfeed, python):
        pf_t, pf_epoch = tta_time_to(pf, target)
        py_t, py_epoch = tta_time_to(py, target)
        py_ref = py_t if py_t is not None else py["wall"][-1]
        rows.append({"seed": seed, "pinfeed_top1": pf["top1"][-1], "python_top1": py["top1"][-1],
                     "pinfeed_s": pf_t, "pinfeed_epoch": pf_epoch, "python_s": py_t, "python_epoch": py_epoch,
                     "python_ref_s": py_ref, "pinfeed_total_s": pf["wall"][-1], "python_total_s": py["wall"][-1],
                     "speedup": py_ref / pf_t if pf_t else None,
                     "pinfeed_samples_per_s": pf["samples_per_s"], "python_samples_per_s": py["samples_per_s"],
                     "pinfeed_projected_s": tta_project(pf, images, target_images) if target_images else None,
                     "python_projected_s": tta_project(py, images, target_images) if target_images else None})
    summary = {k: dict(zip(("mean", "se"), tta_mean_se([r[k] for r in rows])))
               for k in ("pinfeed_top1", "python_top1", "pinfeed_s", "python_s", "python_ref_s", "pinfeed_total_s",
                         "python_total_s", "speedup", "pinfeed_samples_per_s", "python_samples_per_s",
                         "pinfeed_projected_s", "python_projected_s")}
    reached = sum(r["pinfeed_s"] is not None for r in rows)
    gap = summary["pinfeed_top1"]["mean"] - summary["python_top1"]["mean"]
    ses = [summary[k]["se"] for k in ("pinfeed_top1", "python_top1")]
    gap_se = math.sqrt(sum(s * s for s in ses)) if None not in ses else None
    ratio = (summary["python_ref_s"]["mean"] / summary["pinfeed_s"]["mean"]
             if reached == len(rows) and summary["pinfeed_s"]["mean"] else None)
    mean_curves = {side: tta_mean_curve(runs, target) for side, runs in (("pinfeed", pinfeed), ("python", python))}
    pf_mean_s, py_mean_s = mean_curves["pinfeed"]["target_s"], mean_curves["python"]["target_s"]
    curves = [{"seed": seed, "pinfeed": {"wall": pf["wall"], "top1": pf["top1"]},
               "python": {"wall": py["wall"], "top1": py["top1"]}} for seed, pf, py in zip(seeds, pinfeed, python)]
    return {"target_top1": target, "tolerance_points": tolerance, "seeds": rows, "summary": summary, "curves": curves,
            "images": images, "projected_images": target_images,
            "pinfeed_reached": reached, "runs": len(rows), "ratio_of_mean_times": ratio,
            "mean_curves": mean_curves,
            "ratio_of_mean_curves": py_mean_s / pf_mean_s if pf_mean_s and py_mean_s else None,
            "top1_gap_points": 100 * gap, "top1_gap_se_points": None if gap_se is None else 100 * gap_se,
            "gap_within_1_point": abs(100 * gap) <= 1.0,
            "gap_within_se": None if gap_se is None else abs(gap) <= gap_se,
            "clock": {"pinfeed": sorted({r["clock"] for r in pinfeed}), "python": sorted({r["clock"] for r in python})}}


def pct(v):
    return "n/a" if v is None else f"{100 * v:.2f}"


def tta_secs(v, epoch=None):
    if v is None:
        return "not reached"
    return f"{v:.1f}" + (f" (ep {epoch})" if epoch else "")


def tta_times(v):
    return "n/a" if v is None else f"{v:.2f}x"


def tta_pm(s, fmt):
    if s["mean"] is None:
        return "n/a"
    return fmt(s["mean"]) + ("" if s["se"] is None else " ± " + fmt(s["se"]).split(" (")[0].rstrip("x"))


def tta_mean_at(curve):
    if curve["target_s"] is None:
        return "never" if curve["top1"] else "n/a (the runs differ in epochs)"
    return f"at {curve['target_s']:.1f} s (epoch {curve['target_epoch']})"


def tta_markdown(res, note):
    s = res["summary"]
    lines = [f"Target: the Python side's mean final top-1, **{pct(res['target_top1'])}%**"
             + (f" (minus {res['tolerance_points']:g} points)" if res["tolerance_points"] else "")
             + f". Clocks: pinfeed {', '.join(res['clock']['pinfeed'])}; Python {', '.join(res['clock']['python'])}.",
             "",
             "| seed | pinfeed final top-1 (%) | Python final top-1 (%) | pinfeed to target (s) | Python to target (s) "
             "| speed-up | pinfeed whole run (s) | Python whole run (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res["seeds"]:
        py = (tta_secs(r["python_s"], r["python_epoch"]) if r["python_s"] is not None
              else f"{r['python_ref_s']:.1f} (end, below)")
        lines.append(f"| {r['seed']} | {pct(r['pinfeed_top1'])} | {pct(r['python_top1'])} | "
                     f"{tta_secs(r['pinfeed_s'], r['pinfeed_epoch'])} | {py} | {tta_times(r['speedup'])} | "
                     f"{tta_secs(r['pinfeed_total_s'])} | {tta_secs(r['python_total_s'])} |")
    lines.append(f"| mean ± s.e. | {tta_pm(s['pinfeed_top1'], pct)} | {tta_pm(s['python_top1'], pct)} | "
                 f"{tta_pm(s['pinfeed_s'], tta_secs)} | {tta_pm(s['python_ref_s'], tta_secs)} | "
                 f"**{tta_pm(s['speedup'], tta_times)}** | "
                 f"{tta_pm(s['pinfeed_total_s'], tta_secs)} | {tta_pm(s['python_total_s'], tta_secs)} |")
    gap_se = res["top1_gap_se_points"]
    lines += ["",
              f"- pinfeed reached the target in {res['pinfeed_reached']} of {res['runs']} runs; ratio of the mean "
              f"times (Python, a run below the target counted at its end / pinfeed): "
              f"{tta_times(res['ratio_of_mean_times'])}.",
              "- The seeds' mean curves (mean top-1 and mean clock at each epoch): pinfeed's reaches the target "
              + tta_mean_at(res["mean_curves"]["pinfeed"]) + ", Python's " + tta_mean_at(res["mean_curves"]["python"])
              + f": {tta_times(res['ratio_of_mean_curves'])}.",
              f"- Final top-1 gap, pinfeed - Python: {res['top1_gap_points']:+.2f} points"
              + ("" if gap_se is None else f", standard error {gap_se:.2f}")
              + f": {'within' if res['gap_within_1_point'] else 'beyond'} 1 point"
              + ("" if res["gap_within_se"] is None else
                 f", {'within' if res['gap_within_se'] else 'beyond'} the standard error") + ".",
              "- Training samples/s, median over epochs: pinfeed "
              f"{tta_pm(s['pinfeed_samples_per_s'], lambda v: f'{v:.0f}')}"
              f", Python {tta_pm(s['python_samples_per_s'], lambda v: f'{v:.0f}')}."]
    if s["pinfeed_projected_s"]["mean"] is not None and s["python_projected_s"]["mean"] is not None:
        minutes = lambda v: f"{v / 60:.1f} min"  # noqa: E731
        n_train, n_val = res["projected_images"]
        lines.append(f"- Projected, not measured: the whole run with {n_train:,} training and {n_val:,} validation "
                     f"images (each epoch at its measured rate and evaluation time, scaled; the overhead as "
                     f"measured): pinfeed {tta_pm(s['pinfeed_projected_s'], minutes)}, Python "
                     f"{tta_pm(s['python_projected_s'], minutes)} "
                     f"({tta_times(s['python_projected_s']['mean'] / s['pinfeed_projected_s']['mean'])}).")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def tta_chart(res, path, title):
    """Top-1 (%) against the clock (s), both sides of every seed; writes path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    runs = [(side, c) for c in res["curves"] for side in ("pinfeed", "python")]
    colours = seed_colours([f"{side} seed {c['seed']}" for side, c in runs], plt)
    for (side, c), colour in zip(runs, colours):
        ax.plot(c[side]["wall"], [100 * v for v in c[side]["top1"]], "-" if side == "pinfeed" else "--", marker="o",
                ms=3, color=colour, label=f"{'pinfeed' if side == 'pinfeed' else 'Python'} seed {c['seed']}")
    ax.axhline(100 * res["target_top1"], color="grey", linestyle=":", label="target (Python's mean final top-1)")
    ax.set_xlabel("seconds from launch" if all("launch" in c for c in res["clock"]["pinfeed"] + res["clock"]["python"])
                  else "seconds (see the table's clocks)")
    ax.set_xlim(left=0)  # the launch
    ax.set_ylabel("val top-1 %")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def tta_main(argv):
    p = parser("tta", TTA_DOC)
    p.add_argument("--pinfeed", nargs="+", required=True, help="pinfeed's per-epoch files, one per seed")
    p.add_argument("--python", nargs="+", required=True, help="the Python stack's, in the same seed order")
    p.add_argument("--seeds", nargs="+", help="labels of the pairs (default 0, 1, ...)")
    p.add_argument("--tolerance", type=float, default=0.0, help="points below the Python mean that count as reached")
    p.add_argument("--md", help="write the markdown table here (it goes to stdout too)")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--note", default="", help="a line under the table: machine, recipe, data")
    p.add_argument("--png", help="draw top-1 against the clock for every run here (needs matplotlib)")
    p.add_argument("--images", nargs=2, type=int, metavar=("TRAIN", "VAL"), help="the runs' training and val images")
    p.add_argument("--project", nargs=2, type=int, metavar=("TRAIN", "VAL"),
                   help="with --images: each run's time projected to these many images (e.g. 1281167 50000)")
    args = p.parse_args(argv)
    if args.png:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(f"error: cannot draw {args.png}: matplotlib is missing from {sys.executable} (scripts/setup.sh "
                  "installs it into its venv)", file=sys.stderr)
            return 3
    seeds = args.seeds or [str(i) for i in range(len(args.pinfeed))]
    if not len(args.pinfeed) == len(args.python) == len(seeds):
        print(f"error: {len(args.pinfeed)} pinfeed runs, {len(args.python)} Python runs and {len(seeds)} seeds: "
              "one of each per seed", file=sys.stderr)
        return 2
    try:
        pinfeed = [tta_read_run(f) for f in args.pinfeed]
        python = [tta_read_run(f) for f in args.python]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.project and not args.images:
        print("error: --project needs --images (the runs' own numbers of images)", file=sys.stderr)
        return 2
    res = tta_summarise(pinfeed, python, seeds, args.tolerance, args.images, args.project)
    md = tta_markdown(res, args.note)
    print(md, end="")
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res | {"note": args.note, "files": {"pinfeed": args.pinfeed, "python": args.python}}, f,
                      indent=2)
    if args.png:
        tta_chart(res, args.png, f"Time to accuracy: pinfeed (solid) and the Python stack (dashed); speed-up "
                             f"{tta_times(res['summary']['speedup']['mean'])}")
    return 0


# ---- parity --------------------------------------------------------------------------------------

PARITY_DOC = """Accuracy parity of pinfeed and the torchvision reference: curves, table and the verdict
(scripts/time_to_accuracy.sh --parity).

    tables.py parity --pinfeed P0.jsonl P1.jsonl --reference R0.jsonl R1.jsonl [--seeds 0 1] --out-dir DIR
                     [--threshold 1.0] [--note TEXT] [--no-chart]
    tables.py parity --from PARITY.json --out-dir DIR ...    (the runs of a parity.json it wrote)

Each file holds one run's per-epoch JSON lines: pinfeed's metrics.jsonl, or what scripts/reference_train.py
writes (the same fields: epoch, train_loss, val_top1, val_top5 as fractions, samples_per_s, epoch_s). The i-th
file of each side is seed i. Writes DIR/parity.png (val top-1 and train loss against epoch, one line per run),
DIR/parity.md (final top-1 per seed, means, difference in points) and DIR/parity.json (every curve).
The table also gives the standard error of the mean difference and whether difference +- 2 standard errors lies
within the threshold, beyond it, or across it (then more seeds are needed to settle it).
Exit status: 0 when |mean final top-1 difference| <= threshold points, 1 when larger, 2 when an input is
missing, empty or the runs disagree on their number of epochs, 3 when the chart cannot be drawn (matplotlib
missing; --no-chart leaves it out).
"""


def parity_read_run(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: {e}")
    rows = [r for r in rows if "epoch" in r]
    if not rows:
        raise ValueError(f"{path}: no epoch rows")
    if any(r.get("val_top1") is None for r in rows):
        raise ValueError(f"{path}: an epoch without val_top1 (train.eval = false?)")
    return sorted(rows, key=lambda r: r["epoch"])


def seed_colours(labels, plt):
    """A colour per seed, distinct for every seed, the same on both sides (pinfeed solid, torchvision dashed).
    labels: "<side> seed <s>" of each run."""
    seeds = list(dict.fromkeys(label.rsplit(" seed ", 1)[-1] for label in labels))
    n = len(seeds)
    if n <= 20:  # qualitative maps: tab10's colours, then tab20's
        cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
        colour = {s: cmap(i) for i, s in enumerate(seeds)}
    else:
        colour = {s: plt.get_cmap("turbo")(i / (n - 1)) for i, s in enumerate(seeds)}
    return [colour[label.rsplit(" seed ", 1)[-1]] for label in labels]


def parity_chart(runs, path, title):
    """Writes the chart to path; returns the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = seed_colours([label for label, _ in runs], plt)
    for (label, rows), colour in zip(runs, colours):
        style = "-" if label.startswith("pinfeed") else "--"
        epochs = [r["epoch"] for r in rows]
        ax1.plot(epochs, [100 * r["val_top1"] for r in rows], style, marker="o", ms=3, color=colour, label=label)
        ax2.plot(epochs, [r["train_loss"] for r in rows], style, marker="o", ms=3, color=colour, label=label)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("val top-1 %")
    ax1.set_title("validation top-1")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("train loss (label smoothing included)")
    ax2.set_title("training loss")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def parity_main(argv):
    p = parser("parity", PARITY_DOC)
    p.add_argument("--pinfeed", nargs="+", default=[], help="pinfeed metrics.jsonl, one per seed")
    p.add_argument("--reference", nargs="+", default=[], help="reference_train.py output, one per seed")
    p.add_argument("--from", dest="source", help="a parity.json this script wrote: its seeds and runs")
    p.add_argument("--seeds", nargs="+", default=None, help="seed of each file (default 0, 1, ...)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--threshold", type=float, default=1.0, help="allowed |mean difference|, top-1 points")
    p.add_argument("--note", default="", help="a line for the table's header (data, machine)")
    p.add_argument("--no-chart", action="store_true", help="the table and JSON only, no parity.png")
    args = p.parse_args(argv)
    if not args.no_chart:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(f"error: cannot draw parity.png: matplotlib is missing from {sys.executable} (scripts/setup.sh "
                  "installs it into its venv); --no-chart skips the chart", file=sys.stderr)
            return 3
    if bool(args.source) == bool(args.pinfeed or args.reference):
        print("error: give --pinfeed and --reference files, or --from PARITY.json", file=sys.stderr)
        return 2
    if args.source:
        try:
            with open(args.source) as f:
                saved = json.load(f)
            seeds, pin, ref = [str(s) for s in saved["seeds"]], saved["pinfeed"], saved["torchvision"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"error: {args.source}: not a parity.json of this script ({e})", file=sys.stderr)
            return 2
    else:
        if len(args.pinfeed) != len(args.reference):
            print("error: give as many --pinfeed files as --reference files (one per seed)", file=sys.stderr)
            return 2
        seeds = args.seeds or [str(i) for i in range(len(args.pinfeed))]
        if len(seeds) != len(args.pinfeed):
            print("error: --seeds needs one seed per file", file=sys.stderr)
            return 2
        try:
            pin = [parity_read_run(f) for f in args.pinfeed]
            ref = [parity_read_run(f) for f in args.reference]
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    lengths = {len(r) for r in pin + ref}
    if len(lengths) != 1:
        print(f"error: the runs have different numbers of epochs: {sorted(lengths)}", file=sys.stderr)
        return 2

    final = lambda runs, k: [r[-1][k] for r in runs]  # noqa: E731
    pin_top1, ref_top1 = final(pin, "val_top1"), final(ref, "val_top1")
    pin_mean, ref_mean = statistics.fmean(pin_top1), statistics.fmean(ref_top1)
    diff = 100 * (pin_mean - ref_mean)
    ok = abs(diff) <= args.threshold
    # Standard error of the difference of the two means, each side's seeds taken as independent runs (a seed fixes
    # the draws within one implementation, not across the two, and cuDNN's sums are not deterministic anyway).
    se = None
    if len(pin_top1) > 1 and len(ref_top1) > 1:
        se = 100 * math.sqrt(statistics.variance(pin_top1) / len(pin_top1) +
                             statistics.variance(ref_top1) / len(ref_top1))
    epochs = lengths.pop()

    def spread(values):
        return 100 * (max(values) - min(values)) if len(values) > 1 else None

    def median_rate(runs):
        return statistics.median(r["samples_per_s"] for run in runs for r in run if r.get("samples_per_s"))

    lines = ["# Accuracy parity: pinfeed and torchvision, one recipe", ""]
    if args.note:
        lines += [args.note, ""]
    lines += [f"Final val top-1 after {epochs} epochs (%), per seed:", "",
              "| seed | pinfeed top-1 | torchvision top-1 | difference (points) | pinfeed top-5 | torchvision top-5 |",
              "|---|---|---|---|---|---|"]
    for s, a, b in zip(seeds, pin, ref):
        lines.append(f"| {s} | {pct(a[-1]['val_top1'])} | {pct(b[-1]['val_top1'])} | "
                     f"{100 * (a[-1]['val_top1'] - b[-1]['val_top1']):+.2f} | {pct(a[-1].get('val_top5'))} | "
                     f"{pct(b[-1].get('val_top5'))} |")
    lines.append(f"| **mean** | **{100 * pin_mean:.2f}** | **{100 * ref_mean:.2f}** | **{diff:+.2f}** | "
                 f"{pct(statistics.fmean(final(pin, 'val_top5')))} | {pct(statistics.fmean(final(ref, 'val_top5')))} |")
    seed_spread = [spread(pin_top1), spread(ref_top1)]
    lines += ["", f"**{'PASS' if ok else 'FAIL'}**: |mean difference| {abs(diff):.2f} points "
              f"{'<=' if ok else '>'} {args.threshold:g}.", ""]
    if se is not None:
        low, high = diff - 2 * se, diff + 2 * se
        if max(abs(low), abs(high)) <= args.threshold:
            reading = f"the whole interval is within the threshold of {args.threshold:g}"
        elif low > args.threshold or high < -args.threshold:
            reading = f"the whole interval is beyond the threshold of {args.threshold:g}: a real gap"
        else:
            reading = (f"the interval reaches both within and beyond the threshold of {args.threshold:g}: these "
                       f"seeds cannot settle it, more can")
        lines += [f"Standard error of the mean difference: {se:.2f} points (each side's seeds as independent runs); "
                  f"the difference +- 2 standard errors is [{low:+.2f}, {high:+.2f}]: {reading}.", ""]
    if seed_spread[0] is not None:
        lines += [f"Seed-to-seed spread of the final top-1 (max - min): pinfeed {seed_spread[0]:.2f}, torchvision "
                  f"{seed_spread[1]:.2f} points.", ""]
    lines += [f"Final train loss (mean of seeds): pinfeed {statistics.fmean(final(pin, 'train_loss')):.4f}, "
              f"torchvision {statistics.fmean(final(ref, 'train_loss')):.4f}. Training speed, median over epochs "
              f"(not the comparison; eval excluded): pinfeed {median_rate(pin):.0f}, torchvision "
              f"{median_rate(ref):.0f} samples/s; wall per run: pinfeed "
              f"{statistics.fmean(sum(r['epoch_s'] for r in run) for run in pin):.0f} s, torchvision "
              f"{statistics.fmean(sum(r['epoch_s'] for r in run) for run in ref):.0f} s (epochs, eval included).", "",
              "![val top-1 and train loss per epoch](parity.png)", ""]
    lines += ["Val top-1 (%) per epoch:", "",
              "| epoch | " + " | ".join([f"pinfeed s{s}" for s in seeds] + [f"torchvision s{s}" for s in seeds]) + " |",
              "|---|" + "---|" * (2 * len(seeds))]
    for e in range(epochs):
        lines.append(f"| {pin[0][e]['epoch']} | " + " | ".join(pct(run[e]["val_top1"]) for run in pin + ref) + " |")
    md = "\n".join(lines) + "\n"

    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "parity.md"), "w") as f:
        f.write(md)
    curves = {"threshold_points": args.threshold, "mean_difference_points": diff, "standard_error_points": se,
              "pass": ok, "seeds": seeds,
              "pinfeed": pin, "torchvision": ref}
    with open(os.path.join(args.out_dir, "parity.json"), "w") as f:
        json.dump(curves, f, indent=1)
    runs = [(f"pinfeed seed {s}", r) for s, r in zip(seeds, pin)] + \
           [(f"torchvision seed {s}", r) for s, r in zip(seeds, ref)]
    if not args.no_chart:
        parity_chart(runs, os.path.join(args.out_dir, "parity.png"),
              f"ResNet-50, same recipe: pinfeed (solid) and torchvision (dashed); mean final top-1 difference "
              f"{diff:+.2f} points")
    print(md)
    return 0 if ok else 1


# ---- modes ---------------------------------------------------------------------------------------

MODES_DOC = """Every transfer mode, pinfeed's and Python's, one table per configuration (scripts/bench_feed.sh
--modes): each row's wait, GPU idle, samples/s, its ratio to the pageable row and its share of the gpu_resident row
of the same implementation.

    tables.py modes OUT_DIR CONFIG [CONFIG ...]

Reads OUT_DIR/CONFIG/bench.json, and where they exist OUT_DIR/CONFIG/reference.json (scripts/reference_pytorch.py),
OUT_DIR/CONFIG/dali.json (scripts/reference_dali.py), OUT_DIR/CONFIG-uint8/bench.json and
OUT_DIR/CONFIG-graph/bench.json; writes OUT_DIR/results.md and OUT_DIR/results.csv (every repeat).
"""


def load_json_if(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def modes_fmt(v, digits=0, scale=1.0):
    return "n/a" if v is None else f"{v * scale:.{digits}f}"


def modes_rows_of(doc, label):
    out = []
    for r in doc["rows"] if doc else []:
        r = dict(r)
        r["label"] = label
        out.append(r)
    return out


def modes_table(config, rows):
    base = {}
    for r in rows:
        if r["mode"] in ("pageable", "gpu_resident"):
            base[(r["label"], r["mode"])] = r["samples_per_s_median"]
    lines = [f"### {config}", "",
             "| implementation | mode | wait ms p50 / mean | GPU idle % | samples/s median [min-max] | x vs pageable | % of gpu_resident |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        vals = [v for v in r["samples_per_s"] if v is not None]
        pageable = base.get((r["label"], "pageable")) or base.get((r["label"].split(" ")[0], "pageable"))
        # each implementation against its own ceiling (graph rows against the graphed ceiling)
        resident = base.get((r["label"], "gpu_resident")) or base.get((r["label"].split(" ")[0], "gpu_resident"))
        med = r["samples_per_s_median"]
        x = "" if r["mode"] in ("gpu_resident", "loader_only") or not pageable else f"{med / pageable:.2f}x"
        pct = "" if r["mode"] == "loader_only" or not resident else f"{100 * med / resident:.1f}%"
        lines.append(f"| {r['label']} | {r['mode']} | {modes_fmt(r['wait_ms_p50_median'], 2)} / "
                     f"{modes_fmt(r['wait_ms_mean_median'], 2)} | {modes_fmt(r['gpu_idle_median'], 1, 100)} | "
                     f"{med:.0f} [{min(vals):.0f}-{max(vals):.0f}] | {x} | {pct} |")
    return "\n".join(lines) + "\n"


def modes_main(argv):
    p = parser("modes", MODES_DOC)
    p.add_argument("out", metavar="OUT_DIR", help="the folder bench_feed.sh --modes wrote")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help="its configurations (sub-folders)")
    args = p.parse_args(argv)
    out = args.out
    if not os.path.isdir(out):
        print(f"error: {out} is not a folder of bench results", file=sys.stderr)
        return 2
    md, csv = [], ["config,implementation,mode,repeat,samples_per_s,wait_ms_p50,wait_ms_mean,gpu_idle"]
    for c in args.configs:
        pin = load_json_if(os.path.join(out, c, "bench.json"))
        ref = load_json_if(os.path.join(out, c, "reference.json"))
        u8 = load_json_if(os.path.join(out, c + "-uint8", "bench.json"))
        graph = load_json_if(os.path.join(out, c + "-graph", "bench.json"))
        dali = load_json_if(os.path.join(out, c, "dali.json"))
        rows = (modes_rows_of(pin, "pinfeed") + modes_rows_of(ref, "pytorch") + modes_rows_of(u8, "pinfeed uint8")
                + modes_rows_of(graph, "pinfeed uint8+graph") + modes_rows_of(dali, "dali"))
        if not rows:
            continue
        md.append(modes_table(c, rows))
        for r in rows:
            for i, v in enumerate(r["samples_per_s"]):
                csv.append(",".join(str(x) for x in [c, r["label"], r["mode"], i + 1, v, r["wait_ms_p50"][i],
                                                      r["wait_ms_mean"][i], r["gpu_idle"][i]]).replace("None", ""))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    print("\n".join(md))
    return 0


COMMANDS = {"step": step_main, "fusion": fusion_main, "feed": feed_main, "schedule": schedule_main,
            "modes": modes_main, "tta": tta_main, "parity": parity_main}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"error: unknown sub-command {argv[0]!r}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

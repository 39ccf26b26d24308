"""The tables of `scripts/tables.py schedule|tta`: whole training runs against the clock, from their per-epoch
lines (a scheduled run's metrics.jsonl; each seed's run on both sides). The usage and each sub-command's --help:
tables.py."""
import json
import math
import statistics
import sys

from tables import parser, pct, seed_colours


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


# ---- project ---------------------------------------------------------------------------------------

PROJECT_DOC = """One pinfeed run's time projected to another dataset's size (tta_project(): every epoch's training at
its measured rate, its evaluation scaled by the val images, plus the run's own overhead), beside a reported time.

    tables.py project --images TRAIN VAL --project TRAIN VAL [--reported MINUTES --reported-label TEXT]
                      METRICS_JSONL

Prints one Markdown table row set: the run's epochs, median samples/s, measured minutes, projected minutes, and
the reported time where given. Exit code 2 on unreadable input.
"""


def project_main(argv):
    p = parser("project", PROJECT_DOC)
    p.add_argument("metrics", metavar="METRICS_JSONL")
    p.add_argument("--images", nargs=2, type=int, required=True, metavar=("TRAIN", "VAL"))
    p.add_argument("--project", nargs=2, type=int, required=True, metavar=("TRAIN", "VAL"))
    p.add_argument("--reported", type=float, help="a reported time in minutes to print beside the projection")
    p.add_argument("--reported-label", default="reported")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    try:
        run = tta_read_run(args.metrics)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    projected = tta_project(run, args.images, args.project)
    if projected is None:
        print(f"error: {args.metrics}: an epoch lacks samples_per_s or eval_s", file=sys.stderr)
        return 2
    rates = [r for r in run["rates"] if r]
    print("| epochs | top-1 at the end (these data) | samples/s, median [min-max] | this run (min) | "
          f"projected to {args.project[0]:,} + {args.project[1]:,} images (min) |"
          + (f" {args.reported_label} (min) |" if args.reported else ""))
    print("| --- | --- | --- | --- | --- |" + (" --- |" if args.reported else ""))
    print(f"| {len(run['top1'])} | {100 * run['top1'][-1]:.2f}% | {statistics.median(rates):,.0f} "
          f"[{min(rates):,.0f}-{max(rates):,.0f}] | {run['wall'][-1] / 60:.2f} | {projected / 60:.1f} |"
          + (f" {args.reported:.1f} |" if args.reported else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"metrics": args.metrics, "clock": run["clock"], "images": args.images,
                       "project": args.project, "run_s": run["wall"][-1], "projected_s": projected,
                       "rates": run["rates"], "eval_s": run["eval_s"], "top1": run["top1"],
                       "reported_min": args.reported}, f, indent=2)
    return 0

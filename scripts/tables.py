#!/usr/bin/env python3
"""Every table the bench and accuracy scripts print, one sub-command each, from the JSON files they write:

  step      the training step against its Python peers           scripts/bench_step.sh
  archs     the step of every ResNet against torch.compile's        scripts/bench_step.sh --archs
  fusion    the cuDNN frontend fusions, layer by layer             scripts/bench_step.sh --fusion
  feed      the feed from JPEG files against its ceiling and DALI  scripts/bench_feed.sh
  schedule  a scheduled run, epoch by epoch, against each side's ceiling   scripts/bench_feed.sh --schedule
  modes     every transfer mode, pinfeed and Python                scripts/bench_feed.sh --modes
  tta       time to accuracy: the table, and the curves' chart     scripts/time_to_accuracy.sh
  project   one pinfeed run's time projected to ImageNet-1k      scripts/time_to_accuracy.sh --project
  parity    accuracy parity: the table, the chart and the verdict  scripts/time_to_accuracy.sh --parity

    scripts/tables.py SUB-COMMAND [options]     (scripts/tables.py SUB-COMMAND --help: its inputs and figures)

Standard library only; the two charts need matplotlib.
"""
# The sub-commands in three files, by what they read: tables_bench.py (a benchmark's JSON: step, fusion, feed,
# modes), tables_runs.py (whole training runs against the clock: schedule, tta) and this one: the command line,
# what the tables share, and parity (whole runs too, but beside tta it would make one file of 500 lines).
import argparse
import importlib
import json
import math
import os
import statistics
import sys


# ---- what the tables share -----------------------------------------------------------------------


def parser(name, doc):
    return argparse.ArgumentParser(prog=f"tables.py {name}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def pct(v):
    return "n/a" if v is None else f"{100 * v:.2f}"


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


# Each sub-command's module, which holds it as <sub-command>_main(argv). Imported when it runs: those modules
# import what the tables share from this one.
COMMANDS = {"step": "tables_bench", "archs": "tables_bench", "fusion": "tables_bench", "feed": "tables_bench", "schedule": "tables_runs",
            "modes": "tables_bench", "tta": "tables_runs", "project": "tables_runs",
            "parity": __name__}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"error: unknown sub-command {argv[0]!r}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return getattr(importlib.import_module(COMMANDS[argv[0]]), f"{argv[0]}_main")(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

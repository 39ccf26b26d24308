#!/usr/bin/env python3
"""Combined table (markdown, CSV) and chart (PNG) from `pinfeed bench` and scripts/reference_pytorch.py output.

usage: plot_bench.py [--no-charts] OUT_DIR CONFIG [CONFIG ...]
reads OUT_DIR/CONFIG/bench.json, OUT_DIR/CONFIG/reference.json (optional), OUT_DIR/CONFIG/dali.json (optional,
scripts/reference_dali.py: its rows join the table), OUT_DIR/CONFIG-uint8/bench.json (optional); writes OUT_DIR/results.md, OUT_DIR/results.csv and OUT_DIR/CONFIG.png.
Without matplotlib it exits 3 before writing anything, unless --no-charts asks for the tables alone.
"""
import json
import os
import sys

ORDER = ["pageable", "pinned", "non_blocking", "pinned_non_blocking", "dual_stream", "gpu_resident", "loader_only"]


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(v, digits=0, scale=1.0):
    return "n/a" if v is None else f"{v * scale:.{digits}f}"


def rows_of(doc, label):
    out = []
    for r in doc["rows"] if doc else []:
        r = dict(r)
        r["label"] = label
        out.append(r)
    return out


def table(config, rows):
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
        lines.append(f"| {r['label']} | {r['mode']} | {fmt(r['wait_ms_p50_median'], 2)} / {fmt(r['wait_ms_mean_median'], 2)} "
                     f"| {fmt(r['gpu_idle_median'], 1, 100)} | {med:.0f} [{min(vals):.0f}-{max(vals):.0f}] | {x} | {pct} |")
    return "\n".join(lines) + "\n"


# Bars whose medians differ by this factor or more share a logarithmic axis: on a linear one the small ones (a
# 9 samples/s row beside 24,841) would not show.
LOG_AXIS_RATIO = 100


def axis_scale(medians):
    """ "log" when the positive medians span LOG_AXIS_RATIO or more, else "linear"."""
    positive = [m for m in medians if m and m > 0]
    return "log" if positive and max(positive) / min(positive) >= LOG_AXIS_RATIO else "linear"


def chart(config, rows, path):
    """Writes the chart to path: a bar per row, labelled with its median; returns the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = sorted({r["label"] for r in rows}, key=lambda l: (l != "pinfeed", l))
    modes = [m for m in ORDER if any(r["mode"] == m for r in rows)]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    scale = axis_scale([r["samples_per_s_median"] for r in rows])
    ax.set_yscale(scale)
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs, ys, lo, hi = [], [], [], []
        for j, m in enumerate(modes):
            r = next((r for r in rows if r["label"] == label and r["mode"] == m), None)
            if not r:
                continue
            vals = [v for v in r["samples_per_s"] if v is not None]
            xs.append(j + i * width)
            ys.append(r["samples_per_s_median"])
            lo.append(r["samples_per_s_median"] - min(vals))
            hi.append(max(vals) - r["samples_per_s_median"])
        bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=label)
        ax.bar_label(bars, labels=[f"{y:,.0f}" for y in ys], fontsize=7, padding=2)
    ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(modes))])
    ax.set_xticklabels(modes, rotation=15)
    ax.set_ylabel("samples/s (median, min-max" + (", log scale)" if scale == "log" else ")"))
    ax.set_title(f"ResNet-50 training throughput by host-to-device mode: {config}")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def main():
    args = sys.argv[1:]
    charts = "--no-charts" not in args
    args = [a for a in args if a != "--no-charts"]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, configs = args[0], args[1:]
    if not os.path.isdir(out):
        print(f"error: {out} is not a folder of bench results", file=sys.stderr)
        return 2
    if charts:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(f"error: cannot draw the charts: matplotlib is missing from {sys.executable} (scripts/setup.sh "
                  "installs it into its venv); --no-charts writes the tables alone", file=sys.stderr)
            return 3
    md, csv = [], ["config,implementation,mode,repeat,samples_per_s,wait_ms_p50,wait_ms_mean,gpu_idle"]
    for c in configs:
        pin = load(os.path.join(out, c, "bench.json"))
        ref = load(os.path.join(out, c, "reference.json"))
        u8 = load(os.path.join(out, c + "-uint8", "bench.json"))
        graph = load(os.path.join(out, c + "-graph", "bench.json"))
        dali = load(os.path.join(out, c, "dali.json"))
        rows = rows_of(pin, "pinfeed") + rows_of(ref, "pytorch") + \
            rows_of(u8, "pinfeed uint8") + rows_of(graph, "pinfeed uint8+graph") + rows_of(dali, "dali")
        if not rows:
            continue
        md.append(table(c, rows))
        for r in rows:
            for i, v in enumerate(r["samples_per_s"]):
                csv.append(",".join(str(x) for x in [c, r["label"], r["mode"], i + 1, v, r["wait_ms_p50"][i],
                                                      r["wait_ms_mean"][i], r["gpu_idle"][i]]).replace("None", ""))
        if charts:
            chart(c, rows, os.path.join(out, c + ".png"))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())

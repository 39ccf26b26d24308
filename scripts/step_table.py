#!/usr/bin/env python3
"""The training step's comparison table from bench JSON files: `pinfeed bench` (bench.json) and the Python peers
(scripts/reference_pytorch.py, reference_dali.py), one gpu_resident row each (the batch already on the GPU: the
compute ceiling), as scripts/bench_step.sh writes them.

    step_table.py --base LABEL LABEL=FILE [LABEL=FILE ...] [--json OUT]

Prints a Markdown table: samples/s median over the repeats [min-max], and each row's median over --base's.
Standard library only.
"""
import argparse
import json
import statistics
import sys


def gpu_resident(path):
    with open(path) as f:
        doc = json.load(f)
    for row in doc["rows"]:
        if row["mode"] == "gpu_resident":
            values = [v for v in row["samples_per_s"] if v is not None]
            return doc.get("meta", {}), values
    sys.exit(f"{path}: no gpu_resident row")


def cell(row):
    """A row's samples/s as the tables write it: median [min-max]."""
    return f"{row['median']:,.0f} [{row['min']:,.0f}-{row['max']:,.0f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rows", nargs="+", metavar="LABEL=FILE")
    p.add_argument("--base", required=True, help="the label the ratios are taken against")
    p.add_argument("--json", help="also write the table's numbers here")
    args = p.parse_args()
    table = []
    for item in args.rows:
        label, eq, path = item.partition("=")
        if not eq:
            sys.exit(f"expected LABEL=FILE, got {item!r}")
        meta, values = gpu_resident(path)
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
        print(f"| {r['label']} | {r['batch_size']} | {cell(r)} | {r['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": args.base, "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()

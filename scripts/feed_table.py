#!/usr/bin/env python3
"""The feed's comparison table from the JSON files scripts/bench_feed.sh writes: pinfeed's nvJPEG feed
(`pinfeed bench --modes dual_stream,gpu_resident`, one bench.json per point) against its own ceiling and against
DALI + torch.compile: scripts/reference_dali.py --sweep (one JSON per image size), or the DALI rows of
scripts/bench_python_feed.py (--loop: its loop, the resident ceiling around each row, its compile mode).

    feed_table.py --pinfeed FILE [FILE ...] [--dali FILE [FILE ...]] [--loop FILE [FILE ...]] [--json OUT]

Per point (image size, CPU threads): pinfeed's dual_stream samples/s, median over the repeats [min-max], its share
of the gpu_resident row of the same bench, images per CPU thread, the decode alone (the loader_only row: GPU
decode, no step; n/a where the bench had none), DALI's best hw_decoder_load at the same threads, and the ratio of the
medians. A point DALI did not run shows n/a. Standard library only.
"""
import argparse
import json
import statistics


def spread(values):
    values = [v for v in values if v is not None]
    return statistics.median(values), min(values), max(values)


def load(path):
    with open(path) as f:
        return json.load(f)


def pinfeed_points(paths):
    points = {}
    for path in paths:
        doc = load(path)
        meta = doc["meta"]
        rows = {r["mode"]: r for r in doc["rows"]}
        if "dual_stream" not in rows or "gpu_resident" not in rows:
            raise SystemExit(f"{path}: needs a dual_stream and a gpu_resident row")
        feed = spread(rows["dual_stream"]["samples_per_s"])
        ceiling = spread(rows["gpu_resident"]["samples_per_s"])
        decode = spread(rows["loader_only"]["samples_per_s"]) if "loader_only" in rows else None
        points[(meta["image_size"], meta["workers"])] = {"feed": feed, "ceiling": ceiling, "decode": decode}
    return points


def dali_points(paths):
    best = {}
    for path in paths:
        doc = load(path)
        size = doc["meta"]["image_size"]
        mode = doc["meta"].get("compile_mode") or "default"  # files from before the key ran the default mode
        for row in doc["rows"]:
            if row.get("threads") is None:
                continue  # the gpu_resident row
            value = spread(row["samples_per_s"])
            key = (size, row["threads"])
            if key not in best or value[0] > best[key]["value"][0]:
                best[key] = {"value": value, "load": row.get("hw_decoder_load"), "mode": mode}
    return best


def loop_points(paths):
    best = {}
    for path in paths:
        doc = load(path)
        for row in doc["rows"]:
            if not row["feed"].startswith("dali_mixed"):
                continue
            key, value = (row["image_size"], row["threads"]), row["samples_per_s"]
            if key not in best or value > best[key]["value"][0]:
                best[key] = {"value": (value, value, value), "load": float(row["feed"].rsplit("_", 1)[1]),
                             "mode": doc["meta"]["compile_mode"]}
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pinfeed", nargs="+", required=True)
    p.add_argument("--dali", nargs="*", default=[])
    p.add_argument("--loop", nargs="*", default=[], help="bench_python_feed.py JSON: DALI's rows (over --dali's)")
    p.add_argument("--json", help="also write the table's figures here")
    a = p.parse_args()
    ours, theirs = pinfeed_points(a.pinfeed), {**dali_points(a.dali), **loop_points(a.loop)}
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
                      "share_of_ceiling": m / ceiling,
                      "per_thread": m / threads, "decode_alone": decode[0] if decode else None, "dali": d["value"] if d else None,
                      "dali_hw_decoder_load": d["load"] if d else None,
                      "dali_compile_mode": d["mode"] if d else None, "pinfeed_over_dali": ratio})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()

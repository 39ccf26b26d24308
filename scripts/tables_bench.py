"""The tables of `scripts/tables.py step|fusion|feed|modes`: the benchmarks' tables, each from the JSON files of
one benchmark (`pinfeed bench`, the Python peers, the fusion program) as the bench scripts write them. The usage
and each sub-command's --help: tables.py."""
import json
import os
import statistics
import sys

from tables import parser


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


# ---- archs ---------------------------------------------------------------------------------------

ARCHS_DOC = """The step of every ResNet beside torch.compile's, from the table.json that `tables.py step` wrote for each
arch (scripts/bench_step.sh --archs: OUT_DIR/ARCH/table.json, a torch.compile row and a pinfeed row each).

    tables.py archs [--json OUT] TABLE_JSON [TABLE_JSON ...]

Per arch (the folder's name): torch.compile's and pinfeed's samples/s, median over the repeats [min-max], and
pinfeed's median over torch.compile's; the precision and batch of the rows.
"""


def archs_main(argv):
    p = parser("archs", ARCHS_DOC)
    p.add_argument("tables", nargs="+", metavar="TABLE_JSON")
    p.add_argument("--json", help="also write the table's numbers here")
    args = p.parse_args(argv)
    out = []
    print("| model.arch | torch.compile reduce-overhead | pinfeed | pinfeed / torch.compile |")
    print("| --- | --- | --- | --- |")
    for path in args.tables:
        with open(path) as f:
            doc = json.load(f)
        arch = os.path.basename(os.path.dirname(os.path.abspath(path)))
        peer = next((r for r in doc["rows"] if "torch.compile" in r["label"]), None)
        ours = next((r for r in doc["rows"] if r["label"].startswith("pinfeed")), None)
        if peer is None or ours is None:
            print(f"| {arch} | {step_cell(peer) if peer else 'failed'} | {step_cell(ours) if ours else 'failed'} | "
                  "n/a |")
            out.append({"arch": arch, "compile": peer, "pinfeed": ours, "ratio": None})
            continue
        ratio = ours["median"] / peer["median"]
        print(f"| {arch} | {step_cell(peer)} | {step_cell(ours)} | {ratio:.2f}x |")
        out.append({"arch": arch, "compile": peer, "pinfeed": ours, "ratio": ratio,
                    "precision": ours["precision"], "batch_size": ours["batch_size"],
                    "image_size": ours["image_size"]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": out}, f, indent=2)


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

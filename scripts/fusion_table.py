#!/usr/bin/env python3
"""The cuDNN frontend fusions' tables (docs/training-step.md#the-cudnn-frontend-fusions) from the JSON files of
benchmarks/bench_conv_bn_fusion.cu, as scripts/bench_fusion.sh writes them (fusion.json).

    fusion_table.py FUSION.json [MORE.json ...] [--json OUT]

Per stage, in microseconds per step (each layer's time times its count), the forms the program compares:
  forward separate conv + pinfeed's BN (+ add) + ReLU
  forward fused   conv with the statistics in its epilogue (and, but for a block's conv1, the previous BN's
                  scale-bias-ReLU in its prologue) + finalize (+ scale-bias-add-ReLU after conv3)
  backward        the conv2 and conv3 units only: separate: dgrad + wgrad + pinfeed's BN + ReLU backward; fused
                  dgrad+dReLU+dBN-weight + dBN apply + wgrad with scale-bias-ReLU in its prologue
Then every layer's own BatchNorm, forward and backward, pinfeed's against the frontend's; the saving of the
faster pair per layer; and the better of the two changes per stage (where the first file has those times: an
earlier version of the program did not time each BN's own backward). The first file makes the tables; the others
add their savings in brackets. Standard library only.
"""
import argparse
import json
import sys

STAGES = ("s1", "s2", "s3", "s4")
SIDES = {"s1": "56x56", "s2": "28x28", "s3": "14x14", "s4": "7x7"}


BN_TIMES = ("bn_forward_pinfeed", "bn_backward_own_pinfeed", "bn_forward_frontend", "bn_backward_own_frontend")


def need(layer, *names):
    values = [layer.get(n) for n in names]
    if any(v is None for v in values):
        sys.exit(f"{layer['layer']}: no time for {[n for n, v in zip(names, values) if v is None]}")
    return values


def per_stage(doc):
    """{stage: {fwd_today, fwd_fused, bwd_today, bwd_fused, fused_saves, and where doc has them bn_pinfeed,
    bn_frontend, bn_best_pair, frontend_bn_saves}} in us per step."""
    has_bn = all(all(n in layer for n in BN_TIMES) for layer in doc["layers"])
    stages = {s: dict.fromkeys(("fwd_today", "fwd_fused", "bwd_today", "bwd_fused", "bn_pinfeed", "bn_frontend",
                                "bn_best_pair"), 0.0) for s in STAGES}
    for layer in doc["layers"]:
        if "bn_backward_pinfeed" in layer:  # the earlier version's name of the unit's BN backward
            layer.setdefault("bn_backward_unit_pinfeed", layer["bn_backward_pinfeed"])
        stage, role = layer["layer"].split(".")
        n = layer["count"]
        t = stages[stage]
        conv, bn, fin = need(layer, "conv", "bn_forward_pinfeed", "bn_finalize")
        t["fwd_today"] += n * (conv + bn)
        (conv_fused,) = need(layer, "conv_genstats" if role == "conv1" else "sbr_conv_genstats")
        (sbar,) = need(layer, "scale_bias_add_relu") if role == "conv3" else (0.0,)
        t["fwd_fused"] += n * (conv_fused + fin + sbar)
        if role != "conv1":
            dgrad, wgrad, bnb, ddd, apply, sbrw = need(layer, "dgrad", "wgrad", "bn_backward_unit_pinfeed",
                                                       "dgrad_drelu_dbn_weight", "dbn_apply", "sbr_wgrad")
            t["bwd_today"] += n * (dgrad + wgrad + bnb)
            t["bwd_fused"] += n * (ddd + apply + sbrw)
        if not has_bn:
            continue
        pf, pb, ff, fb = need(layer, *BN_TIMES)
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


def total(stages, key):
    return sum(t[key] for t in stages.values())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FUSION.json")
    p.add_argument("--json", help="also write the tables' numbers here")
    args = p.parse_args()
    docs = []
    for path in args.files:
        with open(path) as f:
            docs.append(json.load(f))
    runs = [per_stage(d) for d in docs]
    first = runs[0]

    def bracket(key, stage=None):
        others = [total(r, key) if stage is None else r[stage][key] for r in runs[1:]]
        return " [" + " / ".join(f"{v:,.0f}" for v in others) + "]" if others else ""

    d = docs[0]
    print(f"{d['device']}, cuDNN {d['cudnn']}, cuDNN frontend {d['cudnn_frontend']}, batch {d['batch']}, "
          f"{d['precision']}, best of up to {d['max_plans']} plans per graph (us per step)\n")
    print("| stage | forward separate | forward fused | backward separate | backward fused | fused saves |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, s in enumerate(STAGES):
        t = first[s]
        print(f"| {i + 1} ({SIDES[s]}) | {t['fwd_today']:,.0f} | {t['fwd_fused']:,.0f} | {t['bwd_today']:,.0f} | "
              f"{t['bwd_fused']:,.0f} | {t['fused_saves']:,.0f}{bracket('fused_saves', s)} |")
    print(f"| all | {total(first, 'fwd_today'):,.0f} | {total(first, 'fwd_fused'):,.0f} | "
          f"{total(first, 'bwd_today'):,.0f} | {total(first, 'bwd_fused'):,.0f} | "
          f"**{total(first, 'fused_saves'):,.0f}**{bracket('fused_saves')} |")
    if "bn_pinfeed" not in first["s1"]:
        return write_json(args, runs, None)
    print("\n| stage | pinfeed's BatchNorm | the frontend's | frontend saves | faster pair per layer saves | "
          "better change |")
    print("| --- | --- | --- | --- | --- | --- |")
    better_sum = 0.0
    for i, s in enumerate(STAGES):
        t = first[s]
        better = max(t["fused_saves"], t["bn_best_pair"])
        better_sum += better
        which = "fused form" if t["fused_saves"] >= t["bn_best_pair"] else "frontend's BatchNorm"
        print(f"| {i + 1} | {t['bn_pinfeed']:,.0f} | {t['bn_frontend']:,.0f} | {t['frontend_bn_saves']:,.0f} | "
              f"{t['bn_best_pair']:,.0f} | {which}: {better:,.0f} |")
    print(f"| all | {total(first, 'bn_pinfeed'):,.0f} | {total(first, 'bn_frontend'):,.0f} | "
          f"{total(first, 'frontend_bn_saves'):,.0f} | {total(first, 'bn_best_pair'):,.0f} | {better_sum:,.0f} |")
    write_json(args, runs, better_sum)


def write_json(args, runs, better_sum):
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": args.files, "stages": runs, "better_per_stage": better_sum}, f, indent=1)


if __name__ == "__main__":
    main()

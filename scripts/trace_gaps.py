#!/usr/bin/env python3
"""Where the step's stream waited inside traced steps, and what ran on the GPU's other streams meanwhile.

Usage: scripts/trace_gaps.py TRACE.json[.gz] [--top N]

TRACE.json is what `pinfeed bench --trace-steps A-B` or `pinfeed train` (run.trace_steps) writes (Kineto's Chrome
trace; scripts/trace_idle.py says more). The compute stream is the stream most kernels ran on; the window runs
from the first to the last of Kineto's GPU-side step ranges (gpu_user_annotation "pinfeed::step"), or over all of
the compute stream's events where the trace has none. Per step, averaged over the traced steps:

  compute busy   the sum of the compute stream's kernel, copy and memset durations
  gaps           the sum of the times between one of them ending and the next starting
  by size        the gap time in 5 us buckets (100: 100 us or more): launch gaps are a few microseconds each; a
                 long one is the stream waiting, for its input or for SMs that another stream's blocks hold
  overlapping    the other streams' work that ran during those gaps, by name (nvJPEG's rgba2rgb, the crop
                 kernel, copies by direction), in ms per step: what the step may have waited behind
  in window      the other streams' work in the window, by the same names

Then the longest gaps, each with the compute stream's kernel that started after it (the one that waited).
Python standard library only.
"""
import argparse
import collections

from trace_idle import GPU_CATS, load


def kind(name):
    if "rgba2rgb" in name:
        return "rgba2rgb"
    if "crop_resize" in name:
        return "crop_resize"
    if "Memcpy" in name or "memcpy" in name:
        return "memcpy:" + name[:30]
    if "Memset" in name:
        return "memset"
    return "other:" + name[:50]


def gaps(events, top=12):
    """The figures above from a trace's events: {"stream", "kernels", "steps", and per step in ms "window",
    "busy", "gaps", "overlapping" and "in_window" ({kind: ms}), and "by_size" ({bucket: us}); "largest": the top
    longest gaps over 20 us as [us, the kernel that waited]}. None when the trace has no kernels."""
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    kernels_per_stream = collections.Counter(e["tid"] for e in gpu if e["cat"] == "kernel")
    if not kernels_per_stream:
        return None
    stream = kernels_per_stream.most_common(1)[0][0]
    compute = sorted((e for e in gpu if e["tid"] == stream), key=lambda e: e["ts"])
    other = sorted((e for e in gpu if e["tid"] != stream), key=lambda e: e["ts"])
    ranges = sorted((e for e in events if e.get("name") == "pinfeed::step" and e.get("cat") == "gpu_user_annotation"),
                    key=lambda e: e["ts"])
    if ranges:
        lo, hi = ranges[0]["ts"], ranges[-1]["ts"] + ranges[-1]["dur"]
    else:
        lo, hi = compute[0]["ts"], compute[-1]["ts"] + compute[-1]["dur"]
    steps = max(1, len(ranges))
    inside = [e for e in compute if lo <= e["ts"] <= hi]
    busy = gap_total = 0.0
    by_size, overlapping, longest = collections.Counter(), collections.Counter(), []
    for a, b in zip(inside, inside[1:]):
        busy += a["dur"]
        g0, g1 = a["ts"] + a["dur"], b["ts"]
        if g1 <= g0:
            continue
        gap_total += g1 - g0
        by_size[min(int((g1 - g0) // 5) * 5, 100)] += g1 - g0
        for o in other:
            if o["ts"] > g1:
                break
            overlap = min(g1, o["ts"] + o["dur"]) - max(g0, o["ts"])
            if overlap > 0:
                overlapping[kind(o["name"])] += overlap
        if g1 - g0 > 20:
            longest.append((g1 - g0, b["name"][:60]))
    busy += inside[-1]["dur"] if inside else 0.0
    in_window = collections.Counter()
    for o in other:
        if lo <= o["ts"] <= hi:
            in_window[kind(o["name"])] += o["dur"]
    ms = 1 / steps / 1000
    return {"stream": stream, "kernels": len(inside), "steps": steps, "window": (hi - lo) * ms, "busy": busy * ms,
            "gaps": gap_total * ms, "by_size": {k: round(v / steps, 1) for k, v in sorted(by_size.items())},
            "overlapping": {k: v * ms for k, v in overlapping.most_common(12)},
            "in_window": {k: v * ms for k, v in in_window.most_common(10)},
            "largest": [[g, name] for g, name in sorted(longest, reverse=True)[:top]]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=12, help="longest gaps listed")
    args = p.parse_args()
    g = gaps(load(args.trace)["traceEvents"], args.top)
    if g is None:
        raise SystemExit(f"{args.trace}: no kernels")
    print(f"{args.trace}: compute stream {g['stream']}, {g['kernels']} kernels, {g['steps']} steps, "
          f"window {g['window']:.3f} ms/step")
    print(f"  compute busy {g['busy']:.3f} ms/step, gaps {g['gaps']:.3f} ms/step")
    print("  gap time by size bucket (us, per step):", g["by_size"])
    print("  other-stream work overlapping gaps (ms/step):")
    for k, v in g["overlapping"].items():
        print(f"    {v:7.3f} {k}")
    print("  other-stream work in window (ms/step):")
    for k, v in g["in_window"].items():
        print(f"    {v:7.3f} {k}")
    print("  largest gaps (us, next kernel):")
    for us, name in g["largest"]:
        print(f"    {us:7.1f} {name}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""GPU idle of the traced steps, computed from a pinfeed trace's kernels, beside the StepMeter's own figure.

Usage: scripts/trace_idle.py TRACE.json[.gz] [--max-diff POINTS] [--api]

TRACE.json is what `pinfeed train` (run.trace_steps) or `pinfeed bench --trace-steps` writes: Kineto's Chrome
trace, where CUPTI timed every kernel, copy and memset of the GPU (pid: device, tid: stream), the training thread
marked each step with a "pinfeed::step" range, and "pinfeed" holds the StepMeter's figures for the same steps.

Each GPU event is given to the step whose pinfeed::step range holds its launch (the CUDA runtime or driver call
with the same correlation id, made by the training thread or the autograd thread it waits on). The compute
stream is the stream most of the steps' kernels ran on. A step's GPU span runs from its first GPU event's start
to its last one's end on that stream, widened to Kineto's GPU-side copy of its range (gpu_user_annotation)
where the trace has one per step: a kernel whose launch CUPTI did not report still counts. The window runs from
the first step's span start to the last one's end. Then:

  idle_between_steps   1 - sum(step spans) / window: the StepMeter's definition (its spans run between CUDA
                       events recorded before and after each step on the compute stream), from other clocks
  kernel_idle          1 - |union of the compute stream's kernels| / window: all the time no kernel ran
  idle_inside_steps    sum over steps of (span - its kernels' union) / window: gaps between kernels inside a
                       step (launch gaps, host work between launches), which the StepMeter cannot see
  kernel_busy_in_steps mean over steps of (its kernels' union / its span): the launch-bound figure, 1 when the
                       kernels run back to back, lower when the GPU waits for launches inside the step

With --api, also the host's CUDA runtime and driver calls per thread ("api_calls"): count, total ms and mean us
of each call, the thread that holds the pinfeed::step ranges named "training". Slow launches on the training
thread next to another thread's calls (the copier's, for nvJPEG) are contention for the driver, which the
GPU-side figures above only show as launch gaps.

Prints one JSON object. With --max-diff, exits 1 when the StepMeter's gpu_idle and idle_between_steps differ by
more than POINTS percentage points (or either is missing). Python standard library only.
"""
import argparse
import bisect
import collections
import gzip
import json
import sys

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def load(path):
    """A trace as pinfeed writes it (gzipped when the name ends in .gz): the JSON object, traceEvents and all."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def union_length(intervals):
    """Total length covered by (begin, end) intervals."""
    total, cur_b, cur_e = 0.0, None, None
    for b, e in sorted(intervals):
        if cur_e is None or b > cur_e:
            if cur_e is not None:
                total += cur_e - cur_b
            cur_b, cur_e = b, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_b
    return total


def clip(intervals, lo, hi):
    return [(max(b, lo), min(e, hi)) for b, e in intervals if e > lo and b < hi]


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else None


def ranges(events, name):
    """(begin, end) of the user-annotation ranges called `name`, in time order, in microseconds."""
    return sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                  if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == name)


def analyse(trace):
    events = trace.get("traceEvents", [])
    meta = trace.get("pinfeed", {})
    steps = ranges(events, "pinfeed::step")
    waits = ranges(events, "pinfeed::wait")
    aheads = ranges(events, "pinfeed::ahead")
    out = {
        "steps": meta.get("steps_traced"),
        "n_steps": len(steps),
        "host": {
            "wait_ms_mean": mean((e - b) / 1e3 for b, e in waits),
            "ahead_ms_mean": mean((e - b) / 1e3 for b, e in aheads),
            "step_ms_mean": mean((e - b) / 1e3 for b, e in steps),
        },
        "stepmeter": meta.get("stepmeter"),
    }

    launches = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e["ts"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    starts = [b for b, _ in steps]

    def step_of(event):
        t = launches.get(event.get("args", {}).get("correlation"))
        if t is None:
            return None
        i = bisect.bisect_right(starts, t) - 1
        return i if i >= 0 and t <= steps[i][1] else None

    def stream_of(event):
        args = event.get("args", {})
        return (args.get("device", event.get("pid")), args.get("stream", event.get("tid")))

    owner = [step_of(e) for e in gpu]
    counts = collections.Counter(stream_of(e) for e, s in zip(gpu, owner) if s is not None and e["cat"] == "kernel")
    # Kineto's GPU-side copies of the pinfeed::step ranges, per stream: from the first to the last GPU event
    # tied to the range through CUPTI's external correlation (the training thread's launches; the autograd
    # thread's backward kernels run between them on the same stream).
    annotated = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "gpu_user_annotation" and e.get("name") == "pinfeed::step":
            annotated[stream_of(e)].append((e["ts"], e["ts"] + e.get("dur", 0)))
    for v in annotated.values():
        v.sort()
    by_launch = {}
    if counts:
        compute = counts.most_common(1)[0][0]
        for e, s in zip(gpu, owner):
            if s is not None and stream_of(e) == compute:
                b, x = by_launch.get(s, (e["ts"], e["ts"] + e.get("dur", 0)))
                by_launch[s] = (min(b, e["ts"]), max(x, e["ts"] + e.get("dur", 0)))
    elif annotated:
        compute = max(annotated, key=lambda k: sum(x - b for b, x in annotated[k]))
    else:
        out.update({"compute_stream": None, "idle_between_steps": None, "kernel_idle": None})
        return out
    by_annotation = dict(enumerate(annotated.get(compute, []))) if len(annotated.get(compute, [])) == len(steps) else {}
    # A step's span covers both where both exist: a kernel whose launch CUPTI did not report (an untracked
    # driver entry point) still widens the step it belongs to through the annotation.
    spans = {}
    for s in set(by_launch) | set(by_annotation):
        parts = [p for p in (by_launch.get(s), by_annotation.get(s)) if p]
        spans[s] = (min(b for b, _ in parts), max(x for _, x in parts))
    if not spans:
        out.update({"compute_stream": compute[1], "idle_between_steps": None, "kernel_idle": None})
        return out
    spans_from = " + ".join(name for name, part in (("kernel launches inside pinfeed::step", by_launch),
                                                    ("gpu_user_annotation pinfeed::step", by_annotation)) if part)

    order = sorted(spans.values())
    lo, hi = order[0][0], order[-1][1]
    window = hi - lo
    kernels = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in gpu if e["cat"] == "kernel" and stream_of(e) == compute]
    in_window = clip(kernels, lo, hi)
    busy = union_length(in_window)
    step_busy = {}
    for s, (b, x) in spans.items():
        step_busy[s] = union_length(clip([(kb, kx) for kb, kx in kernels], b, x))
    memcpy = collections.defaultdict(lambda: {"count": 0, "ms": 0.0, "mb": 0.0})
    for e in gpu:
        if e["cat"] != "gpu_memcpy" or e["ts"] + e.get("dur", 0) < lo or e["ts"] > hi:
            continue
        m = memcpy[(stream_of(e), e.get("name", ""))]
        m["count"] += 1
        m["ms"] += e.get("dur", 0) / 1e3
        m["mb"] += e.get("args", {}).get("bytes", 0) / 2**20
    spans_total = sum(x - b for b, x in order)

    def idle_of(part):  # the StepMeter's definition over one source's spans alone, for comparison
        if not part:
            return None
        v = sorted(part.values())
        w = v[-1][1] - v[0][0]
        return 1 - sum(x - b for b, x in v) / w if w > 0 else 0.0

    unlaunched = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in gpu
                  if e["cat"] == "kernel" and stream_of(e) == compute
                  and e.get("args", {}).get("correlation") not in launches]
    unlaunched = clip(unlaunched, lo, hi)
    out.update({
        "device": compute[0],
        "compute_stream": compute[1],
        "step_spans_from": spans_from,
        "n_step_spans": len(order),
        "window_ms": window / 1e3,
        "idle_between_steps": 1 - spans_total / window if window > 0 else 0.0,
        "kernel_idle": 1 - busy / window if window > 0 else 0.0,
        "idle_inside_steps": sum((x - b) - step_busy[s] for s, (b, x) in spans.items()) / window if window > 0 else 0.0,
        "kernel_busy_in_steps": mean(step_busy[s] / (x - b) for s, (b, x) in spans.items() if x > b),
        "step_gpu_ms_mean": spans_total / len(order) / 1e3,
        "kernel_ms_per_step_mean": mean(step_busy.values()) / 1e3,
        "kernels_in_window": len(in_window),
        "idle_between_steps_from_launches": idle_of(by_launch),
        "idle_between_steps_from_annotations": idle_of(by_annotation),
        "kernels_without_launch_in_window": len(unlaunched),
        "kernels_without_launch_ms": union_length(unlaunched) / 1e3,
        "memcpy": [dict(stream=k[0][1], name=k[1], **{f: round(v, 3) if isinstance(v, float) else v for f, v in m.items()})
                   for k, m in sorted(memcpy.items(), key=lambda kv: str(kv[0]))],
    })
    sm = (meta.get("stepmeter") or {}).get("gpu_idle")
    if sm is not None:
        out["stepmeter_minus_trace_points"] = 100 * (sm - out["idle_between_steps"])
        out["stepmeter_minus_kernel_idle_points"] = 100 * (sm - out["kernel_idle"])
    return out


def api_calls(trace, top=12):
    """The CUDA runtime / driver calls per host thread, the costliest `top` per thread first."""
    events = trace.get("traceEvents", [])
    training = {e.get("tid") for e in events if e.get("cat") == "user_annotation" and e.get("name") == "pinfeed::step"}
    calls = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0]))
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATS:
            c = calls[e.get("tid")][e.get("name", "")]
            c[0] += 1
            c[1] += e.get("dur", 0)
    out = []
    for tid, by_name in sorted(calls.items(), key=lambda kv: -sum(c[1] for c in kv[1].values())):
        rows = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
        out.append({"thread": "training" if tid in training else str(tid),
                    "calls": sum(c[0] for c in by_name.values()),
                    "ms": round(sum(c[1] for c in by_name.values()) / 1e3, 3),
                    "top": [{"name": n, "count": c[0], "ms": round(c[1] / 1e3, 3), "mean_us": round(c[1] / c[0], 2)}
                            for n, c in rows]})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", help="trace JSON written by pinfeed (run.trace_steps or bench --trace-steps)")
    p.add_argument("--max-diff", type=float, default=None, metavar="POINTS",
                   help="exit 1 when StepMeter gpu_idle and idle_between_steps differ by more (percentage points)")
    p.add_argument("--api", action="store_true", help="add the CUDA API calls per host thread (api_calls)")
    a = p.parse_args(argv)
    trace = load(a.trace)
    result = {"trace": a.trace, **analyse(trace)}
    if a.api:
        result["api_calls"] = api_calls(trace)
    print(json.dumps(result, indent=2))
    if a.max_diff is not None:
        diff = result.get("stepmeter_minus_trace_points")
        if diff is None or abs(diff) > a.max_diff:
            print(f"{a.trace}: StepMeter and trace idle differ by {diff} points (limit {a.max_diff})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/trace_idle.py on small hand-made traces whose figures are worked out below (Python stdlib only).

Usage: python3 tests/test_trace_idle.py [path/to/trace_idle.py]
"""
import gzip
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

if len(sys.argv) > 1 and sys.argv[1].endswith(".py"):
    SCRIPT = sys.argv.pop(1)
else:
    SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "trace_idle.py")
spec = importlib.util.spec_from_file_location("trace_idle", SCRIPT)
trace_idle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_idle)


def annotation(name, ts, dur, cat="user_annotation", pid=1, tid=11):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}


def launch(correlation, ts, cat="cuda_runtime"):
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "ts": ts, "dur": 0.5, "pid": 1, "tid": 12,
            "args": {"cbid": 211, "correlation": correlation}}


def gpu(correlation, begin, end, stream=7, cat="kernel", **args):
    return {"ph": "X", "cat": cat, "name": "k", "ts": begin, "dur": end - begin, "pid": 0, "tid": stream,
            "args": {"device": 0, "stream": stream, "correlation": correlation, **args}}


def three_steps(stepmeter_idle):
    """Steps on the host at 0-10, 20-30, 40-50 us; on the GPU (stream 7) their kernels run at
    step 0: 100-110, 112-120, 120-125 (span 100-125, kernels 23 of 25 us)
    step 1: 140-150, 155-160         (span 140-160, kernels 15 of 20 us)
    step 2: 200-230, 230-240         (span 200-240, kernels 40 of 40 us)
    Window 100-240 = 140 us; spans 85 us; kernels 78 us."""
    events = [annotation("pinfeed::step", 0, 10), annotation("pinfeed::wait", 10, 10), annotation("pinfeed::step", 20, 10),
              annotation("pinfeed::wait", 30, 10), annotation("pinfeed::step", 40, 10),
              annotation("pinfeed::ahead", 19, 1)]
    launches = {1: 1, 2: 2, 3: 21, 4: 22, 5: 41, 6: 42, 7: 15, 9: 23, 10: 24}
    events += [launch(c, t) for c, t in launches.items()]
    events.append(launch(8, 3, cat="cuda_driver"))  # cuLaunchKernel (cuBLASLt, cuDNN): a launch all the same
    events += [gpu(1, 100, 110), gpu(2, 112, 120), gpu(8, 120, 125), gpu(3, 140, 150), gpu(4, 155, 160),
               gpu(5, 200, 230), gpu(6, 230, 240)]
    events.append(gpu(7, 126, 140, cat="gpu_memcpy", bytes=4 << 20))  # launched in a wait: between steps
    events.append(gpu(99, 50, 95))  # launched before the trace started (no launch event), before the window
    events.append(gpu(9, 141, 300, stream=20))  # another stream (the copy stream's normalisation)
    events.append(gpu(10, 150, 170, stream=20, cat="gpu_memcpy", bytes=1 << 20))
    return {"traceEvents": events,
            "pinfeed": {"steps": [4, 6], "steps_traced": [4, 6], "stepmeter": {"gpu_idle": stepmeter_idle}}}


def run_script(trace, *flags):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        with open(path, "w") as f:
            json.dump(trace, f)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = trace_idle.main([path, *flags])
        return code, json.loads(out.getvalue())


class TraceIdle(unittest.TestCase):
    def test_idle_from_the_kernels_of_the_compute_stream(self):
        code, r = run_script(three_steps(0.40))
        self.assertEqual(code, 0)
        self.assertEqual(r["n_steps"], 3)
        self.assertEqual(r["steps"], [4, 6])
        self.assertEqual(r["compute_stream"], 7)
        self.assertEqual(r["step_spans_from"], "kernel launches inside pinfeed::step")
        self.assertAlmostEqual(r["window_ms"], 0.140)
        self.assertAlmostEqual(r["idle_between_steps"], 1 - 85 / 140)
        self.assertAlmostEqual(r["kernel_idle"], 1 - 78 / 140)
        self.assertAlmostEqual(r["idle_inside_steps"], (2 + 5 + 0) / 140)
        self.assertAlmostEqual(r["kernel_busy_in_steps"], (23 / 25 + 15 / 20 + 40 / 40) / 3)
        self.assertAlmostEqual(r["step_gpu_ms_mean"], 85 / 3 / 1e3)
        self.assertEqual(r["kernels_in_window"], 7)
        self.assertEqual(r["kernels_without_launch_in_window"], 0)
        self.assertIsNone(r["idle_between_steps_from_annotations"])
        self.assertAlmostEqual(r["stepmeter_minus_trace_points"], 100 * (0.40 - (1 - 85 / 140)))
        self.assertAlmostEqual(r["host"]["wait_ms_mean"], 0.010)
        self.assertAlmostEqual(r["host"]["step_ms_mean"], 0.010)
        copies = {m["stream"]: m for m in r["memcpy"]}
        self.assertAlmostEqual(copies[7]["ms"], 0.014)
        self.assertEqual(copies[7]["count"], 1)
        self.assertAlmostEqual(copies[20]["mb"], 1.0)

    def test_max_diff_passes_within_the_limit_and_fails_beyond_it(self):
        self.assertEqual(run_script(three_steps(0.40), "--max-diff", "1")[0], 0)  # 0.71 points apart
        self.assertEqual(run_script(three_steps(0.42), "--max-diff", "1")[0], 1)  # 2.71 points apart
        trace = three_steps(None)
        self.assertEqual(run_script(trace, "--max-diff", "1")[0], 1)  # nothing to compare with

    def test_without_launch_events_the_gpu_side_step_annotations_give_the_spans(self):
        trace = three_steps(0.40)
        trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] not in ("cuda_runtime", "cuda_driver")]
        for begin, end in ((100, 125), (140, 160), (200, 240)):
            trace["traceEvents"].append(annotation("pinfeed::step", begin, end - begin, cat="gpu_user_annotation", pid=0, tid=7))
        trace["traceEvents"].append(annotation("pinfeed::step", 141, 5, cat="gpu_user_annotation", pid=0, tid=20))
        _, r = run_script(trace)
        self.assertEqual(r["step_spans_from"], "gpu_user_annotation pinfeed::step")
        self.assertEqual(r["compute_stream"], 7)
        self.assertAlmostEqual(r["idle_between_steps"], 1 - 85 / 140)
        self.assertAlmostEqual(r["kernel_idle"], 1 - 78 / 140)

    def test_a_kernel_without_its_launch_widens_its_step_through_the_gpu_side_annotation(self):
        trace = three_steps(0.40)
        # Step 1 begins with a kernel at 135-140 whose launch CUPTI did not report; Kineto's GPU-side copy of the
        # step's range covers it (135-160), the launches alone do not (140-160).
        trace["traceEvents"].append(gpu(50, 135, 140))
        for begin, end in ((100, 125), (135, 160), (200, 240)):
            trace["traceEvents"].append(annotation("pinfeed::step", begin, end - begin, cat="gpu_user_annotation", pid=0, tid=7))
        _, r = run_script(trace)
        self.assertEqual(r["step_spans_from"], "kernel launches inside pinfeed::step + gpu_user_annotation pinfeed::step")
        self.assertAlmostEqual(r["idle_between_steps"], 1 - 90 / 140)
        self.assertAlmostEqual(r["idle_between_steps_from_launches"], 1 - 85 / 140)
        self.assertAlmostEqual(r["idle_between_steps_from_annotations"], 1 - 90 / 140)
        self.assertAlmostEqual(r["kernel_idle"], 1 - 83 / 140)
        self.assertEqual(r["kernels_without_launch_in_window"], 1)
        self.assertAlmostEqual(r["kernels_without_launch_ms"], 0.005)

    def test_a_cpu_trace_has_the_host_ranges_and_no_gpu_figures(self):
        trace = {"traceEvents": [annotation("pinfeed::wait", 0, 2000), annotation("pinfeed::step", 2000, 8000)],
                 "pinfeed": {"steps_traced": [0, 0], "stepmeter": {"gpu_idle": None}}}
        code, r = run_script(trace)
        self.assertEqual(code, 0)
        self.assertEqual(r["n_steps"], 1)
        self.assertIsNone(r["idle_between_steps"])
        self.assertAlmostEqual(r["host"]["wait_ms_mean"], 2.0)
        self.assertAlmostEqual(r["host"]["step_ms_mean"], 8.0)

    def test_api_calls_per_thread_name_the_training_thread_and_read_gzip(self):
        def call(name, tid, dur):
            return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": 0, "dur": dur, "pid": 1, "tid": tid}
        events = [annotation("pinfeed::step", 0, 100, tid=11), call("cudaLaunchKernel", 11, 20), call("cudaLaunchKernel", 11, 10),
                  call("cudaMemcpyAsync", 30, 25), call("cudaMemcpyAsync", 30, 35), call("cudaEventRecord", 30, 5)]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json.gz")
            with gzip.open(path, "wt") as f:
                json.dump({"traceEvents": events}, f)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(trace_idle.main([path, "--api"]), 0)
        api = json.loads(out.getvalue())["api_calls"]
        self.assertEqual([t["thread"] for t in api], ["30", "training"])  # the costliest thread first
        self.assertEqual(api[0]["calls"], 3)
        self.assertAlmostEqual(api[0]["ms"], 0.065)
        self.assertEqual(api[0]["top"][0], {"name": "cudaMemcpyAsync", "count": 2, "ms": 0.06, "mean_us": 30.0})
        self.assertEqual(api[1]["top"], [{"name": "cudaLaunchKernel", "count": 2, "ms": 0.03, "mean_us": 15.0}])

    def test_union_counts_overlapping_time_once(self):
        self.assertEqual(trace_idle.union_length([(0, 10), (5, 15), (20, 30), (30, 31)]), 26)
        self.assertEqual(trace_idle.union_length([]), 0)


if __name__ == "__main__":
    unittest.main()

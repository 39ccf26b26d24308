"""scripts/trace_gaps.py on a small hand-made trace whose figures are worked out below (Python stdlib only).

Usage: python3 tests/test_trace_gaps.py [path/to/trace_gaps.py]
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

if len(sys.argv) > 1 and sys.argv[1].endswith(".py"):
    SCRIPT = sys.argv.pop(1)
else:
    SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "trace_gaps.py")


def event(name, ts, dur, tid, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}


class TraceGaps(unittest.TestCase):
    def run_script(self, events):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": events}, f)
            return subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True, check=True).stdout

    def test_gaps_by_size_and_the_other_streams_work_during_them(self):
        # Two steps of 200 us on stream 7 (the one with most kernels). Step 1: kernels [0,50) [52,100) [190,200):
        # gaps of 2 and 90 us; a crop kernel on stream 9 runs [100,190), all inside the long gap. Step 2: kernels
        # [200,300) [303,400): one gap of 3 us, during which an rgba2rgb kernel runs [290,302): 2 us of it inside.
        # A copy on stream 9 at [10,40) overlaps no gap. Per step: busy (50+48+10+100+97)/2 = 152.5 us, gaps
        # (2+90+3)/2 = 47.5 us; bucket 0: (2+3)/2 = 2.5, bucket 90: 45; crop 45 us, rgba2rgb 1 us.
        events = [event("pinfeed::step", 0, 200, 1, "gpu_user_annotation"),
                  event("pinfeed::step", 200, 200, 1, "gpu_user_annotation"),
                  event("sm90_xmma_fprop", 0, 50, 7), event("batchnorm_fwtr", 52, 48, 7),
                  event("elementwise", 190, 10, 7), event("sm90_xmma_dgrad", 200, 100, 7),
                  event("batchnorm_bwtr", 303, 97, 7),
                  event("void pinfeed::gpu::crop_resize_kernel<__half>", 100, 90, 9),
                  event("void nvjpeg::rgba2rgb<5>", 290, 12, 9),
                  event("Memcpy HtoD (Pageable -> Device)", 10, 30, 9, "gpu_memcpy")]
        out = self.run_script(events)
        self.assertIn("compute stream 7, 5 kernels, 2 steps, window 0.200 ms/step", out)
        self.assertIn("compute busy 0.152 ms/step, gaps 0.048 ms/step", out)  # 0.1525 and 0.0475 to 3 places
        self.assertIn("{0: 2.5, 90: 45.0}", out)
        overlapping = out.split("overlapping gaps (ms/step):")[1].split("in window")[0]
        self.assertRegex(overlapping, r"0\.045 crop_resize")
        self.assertRegex(overlapping, r"0\.001 rgba2rgb")
        self.assertNotIn("memcpy", overlapping)
        in_window = out.split("in window (ms/step):")[1].split("largest")[0]
        self.assertRegex(in_window, r"0\.015 memcpy:Memcpy HtoD")
        self.assertRegex(out, r"90\.0 elementwise")  # the one long gap, named by the kernel that waited


if __name__ == "__main__":
    unittest.main()

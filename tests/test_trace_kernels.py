"""scripts/trace_kernels.py on a small hand-made trace whose sums are worked out below (Python stdlib only).

Usage: python3 tests/test_trace_kernels.py [path/to/trace_kernels.py]
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
    SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "trace_kernels.py")


def kernel(name, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": 0, "dur": dur, "pid": 0, "tid": 7}


def step(ts):
    return {"ph": "X", "cat": "user_annotation", "name": "pinfeed::step", "ts": ts, "dur": 10, "pid": 1, "tid": 1}


class TraceKernels(unittest.TestCase):
    def run_script(self, events, *flags):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": events}, f)
            return subprocess.run([sys.executable, SCRIPT, path, *flags], capture_output=True, text=True, check=True).stdout

    def test_sums_per_step_by_kind_and_by_kernel(self):
        # Two steps (the GPU-side copies of the step ranges do not count): BN 2 x (300 + 100) us, a convolution
        # 2 x 500 us, an add 2 x 100 us: per step 400 + 500 + 100 = 1000 us = 1.00 ms.
        events = [step(0), step(20), dict(step(0), cat="gpu_user_annotation")]
        for _ in range(2):
            events += [kernel("void cudnn::batchnorm_fwtr_nhwc_semiPersist<__half>", 300),
                       kernel("void at::native::batch_norm_backward_kernel<float>", 100),
                       kernel("sm90_xmma_fprop_implicit_gemm_f16f16", 500),
                       kernel("void at::native::vectorized_elementwise_kernel<CUDAFunctor_add>", 100)]
        out = self.run_script(events)
        self.assertIn("2 step(s); kernel time per step 1.00 ms, 4 kernels", out)
        self.assertRegex(out, r"batchnorm\s+0\.40 ms\s+40\.0%")
        self.assertRegex(out, r"conv/gemm\s+0\.50 ms\s+50\.0%")
        self.assertRegex(out, r"other\s+0\.10 ms\s+10\.0%")
        self.assertRegex(out, r"0\.500 ms\s+1x  conv/gemm\s+sm90_xmma_fprop")
        lines = [l for l in out.splitlines() if " ms " in l and "x  " in l]
        self.assertEqual(len(lines), 4)
        self.assertEqual(len(self.run_script(events, "--top", "2").splitlines()), len(out.splitlines()) - 2)


if __name__ == "__main__":
    unittest.main()

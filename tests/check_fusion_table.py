"""`scripts/tables.py fusion` on the fusion benchmark's raw data kept in docs/: its totals are the program's own
(per_step_us, the C++ accounting in benchmarks/bench_conv_bn_fusion.cu), the stages add up to them, the earlier
program's file (without each BN's own backward) gives the fused table alone, and every row of the tables it prints
is in docs/training-step.md as printed.

Usage: check_fusion_table.py REPO_ROOT.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail


def run(script, files, out=None):
    r = subprocess.run([sys.executable, str(script), "fusion", *map(str, files)] + (["--json", str(out)] if out else []),
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


# The JSON keeps each time to 0.1 us; a per-step total sums up to 3 of them per layer, times its count (41 in all):
# the program's totals, from the unrounded times, may differ from the file's by up to 0.05 * 3 * 41 us.
TOLERANCE = 0.05 * 3 * 41


def main():
    repo = pathlib.Path(sys.argv[1])
    data = repo / "docs" / "data" / "training-step"
    script = repo / "scripts" / "tables.py"
    files = [data / "fusion.json", data / "fusion-repeat.json", data / "fusion-before-own-bn-backward.json"]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "table.json"
        printed = run(script, files, out)
        table = json.loads(out.read_text())
    for path, stages in zip(files, table["stages"]):
        program = json.loads(path.read_text())["per_step_us"]
        for key, ours in (("forward_today", "fwd_today"), ("forward_fused", "fwd_fused"),
                          ("backward_today", "bwd_today"), ("backward_fused", "bwd_fused")):
            total = sum(s[ours] for s in stages.values())
            if abs(total - program[key]) > TOLERANCE:
                fail(f"{path.name}: {key} {total} against the program's {program[key]}")
        if "bn_pinfeed" in stages["s1"]:
            for key, ours in (("batch_norm_pinfeed", "bn_pinfeed"), ("batch_norm_frontend", "bn_frontend")):
                total = sum(s[ours] for s in stages.values())
                if abs(total - program[key]) > TOLERANCE:
                    fail(f"{path.name}: {key} {total} against the program's {program[key]}")
    if "bn_pinfeed" in table["stages"][2]["s1"]:
        fail("the earlier program's file has no BN backward of its own; no BatchNorm columns expected")
    earlier = run(script, files[2:])
    if "| all |" not in earlier or "pinfeed's BatchNorm" in earlier:
        fail("the earlier file alone:\n" + earlier)
    page = (repo / "docs" / "training-step.md").read_text()
    rows = [line for line in printed.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    if len(rows) != 12:
        fail(f"expected 2 tables of a header and 5 rows:\n{printed}")
    for line in rows:
        if line not in page:
            fail(f"docs/training-step.md lacks the row\n{line}")
    print("ok")


if __name__ == "__main__":
    main()

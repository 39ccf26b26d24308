"""`scripts/tables.py tta` on the time-to-accuracy runs kept in docs/: the table in docs/accuracy-parity.md, row by
row, the mean curves' ratio it quotes (or that a mean curve misses the target) and how many pinfeed runs reach the
target, come out of the raw runs.

Usage: check_tta_table.py REPO_ROOT.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail


def main():
    repo = pathlib.Path(sys.argv[1])
    raw = json.loads((repo / "docs" / "data" / "accuracy-parity" / "tta-h200-reduce-overhead.json").read_text())
    doc = (repo / "docs" / "accuracy-parity.md").read_text()
    seeds = [str(s["seed"]) for s in raw["table"]["seeds"]]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        files = {"pinfeed": [], "python": []}
        for side in files:
            for seed in seeds:
                path = tmp / f"{side}-seed{seed}.jsonl"
                path.write_text("".join(json.dumps(row) + "\n" for row in raw["runs"][f"{side}-seed{seed}"]))
                files[side].append(str(path))
        md = tmp / "tta.md"
        r = subprocess.run([sys.executable, str(repo / "scripts" / "tables.py"), "tta", "--pinfeed", *files["pinfeed"],
                            "--python", *files["python"], "--seeds", *seeds, "--md", str(md),
                            "--json", str(tmp / "tta.json"), "--images", *map(str, raw["table"]["images"]),
                            "--project", *map(str, raw["table"]["projected_images"])], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"exit {r.returncode}\n{r.stdout}{r.stderr}")
        rows = [line for line in md.read_text().splitlines() if line.startswith("| ") and "---" not in line]
        if len(rows) != len(seeds) + 2:
            fail(f"{len(rows)} table lines for {len(seeds)} seeds:\n{md.read_text()}")
        for line in rows:
            if line not in doc:
                fail(f"docs/accuracy-parity.md lacks the row\n{line}")
        table = json.loads((tmp / "tta.json").read_text())
        ratio = table["ratio_of_mean_curves"]
        if ratio is not None and f"{ratio:.2f}x sooner" not in doc:
            fail(f"docs/accuracy-parity.md does not quote the mean curves' ratio {ratio:.2f}x")
        if ratio is None and "mean curve does not reach the target" not in doc:
            fail("the runs' mean curve misses the target; docs/accuracy-parity.md does not say so")
        reached = f"{table['pinfeed_reached']} of {len(seeds)} pinfeed runs reach it"
        if reached not in doc:
            fail(f"docs/accuracy-parity.md does not say '{reached}'")
    print("ok")


if __name__ == "__main__":
    main()

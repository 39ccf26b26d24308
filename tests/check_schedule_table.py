"""`scripts/tables.py schedule` on the scheduled run's raw data kept in docs/: each epoch's share is of its own side's
ceiling, an epoch at a side with no ceiling is refused, and the summary adds images / ceiling and eval_s.

Usage: check_schedule_table.py REPO_ROOT.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail


def main():
    repo = pathlib.Path(sys.argv[1])
    raw = json.loads((repo / "docs" / "data" / "resolution-schedule" / "schedule-ffcv16.json").read_text())
    script = [str(repo / "scripts" / "tables.py"), "schedule"]
    images = raw["train_images"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        metrics = tmp / "metrics.jsonl"
        metrics.write_text("".join(json.dumps(row) + "\n" for row in raw["metrics"]))
        benches = []
        for name, doc in raw["ceiling_benches"].items():
            benches.append(tmp / f"{name}.json")
            benches[-1].write_text(json.dumps(doc))
        out = tmp / "table.json"
        run = [sys.executable, *script, "--metrics", str(metrics), "--train-images", str(images)]
        r = subprocess.run(run + ["--ceilings", *map(str, benches), "--json", str(out)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"exit {r.returncode}\n{r.stdout}{r.stderr}")
        table = json.loads(out.read_text())
        if [e["image_size"] for e in table["epochs"]] != [160] * 12 + [192] * 4:
            fail(f"sides: {[e['image_size'] for e in table['epochs']]}")
        ideal = 0.0
        for e, m in zip(table["epochs"], raw["metrics"]):
            ceiling = table["ceilings"][str(e["image_size"])]
            if abs(e["share_of_ceiling"] - m["samples_per_s"] / ceiling) > 1e-12:
                fail(f"epoch {e['epoch']}: share not of its side's ceiling")
            ideal += images / ceiling + m["eval_s"]
        if abs(table["summary"]["ideal_s"] - ideal) > 1e-9 or "| 13 | 192 |" not in r.stdout:
            fail(f"summary {table['summary']} against {ideal}\n{r.stdout}")
        r = subprocess.run(run + ["--ceilings", str(benches[0])], capture_output=True, text=True)
        if r.returncode == 0 or "no ceiling" not in r.stdout + r.stderr:
            fail(f"a side without a ceiling was not refused: exit {r.returncode}\n{r.stdout}{r.stderr}")
    print("ok")


if __name__ == "__main__":
    main()

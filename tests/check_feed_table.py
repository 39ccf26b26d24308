"""`scripts/tables.py feed` on the feed's raw data kept in docs/: one row per (image size, threads), pinfeed's share of
the gpu_resident row of its own bench, DALI's best hw_decoder_load at the same threads and the ratio of the
medians; a point DALI did not run shows n/a. With --loop (DALI's rows from scripts/bench_python_feed.py), the
resolution schedule's four-side table is what it keeps. The resolution schedule's table of the feed with its parts
taken out is read against its raw runs (probes.json, parts_removed).

Usage: check_feed_table.py REPO_ROOT.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import doc_table, fail


def main():
    repo = pathlib.Path(sys.argv[1])
    data = repo / "docs" / "data" / "gpu-decode"
    script = [str(repo / "scripts" / "tables.py"), "feed"]
    ours = sorted(str(p) for p in data.glob("feed-fp16-*.json"))
    theirs = sorted(str(p) for p in data.glob("dali-compile-fp16-*.json"))
    if len(ours) != 4 or len(theirs) != 2:
        fail(f"expected 4 pinfeed and 2 DALI files in {data}, found {ours} {theirs}")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "feed.json"
        r = subprocess.run([sys.executable, *script, "--pinfeed", *ours, "--dali", *theirs, "--json", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"exit {r.returncode}\n{r.stdout}{r.stderr}")
        table = json.loads(out.read_text())
    if [(t["image_size"], t["threads"]) for t in table] != [(224, 2), (224, 4), (160, 2), (160, 4)]:
        fail(f"rows: {[(t['image_size'], t['threads']) for t in table]}")
    for t in table:
        doc = json.loads((data / f"feed-fp16-{t['image_size']}-w{t['threads']}.json").read_text())
        rows = {row["mode"]: row for row in doc["rows"]}
        if abs(t["pinfeed"][0] - rows["dual_stream"]["samples_per_s_median"]) > 1e-6 * t["pinfeed"][0]:
            fail(f"{t}: pinfeed median is not the bench's")
        if abs(t["share_of_ceiling"] - t["pinfeed"][0] / rows["gpu_resident"]["samples_per_s_median"]) > 1e-9:
            fail(f"{t}: the share is not of the same bench's gpu_resident row")
        dali = json.loads((data / f"dali-compile-fp16-{t['image_size']}.json").read_text())
        best = max(row["samples_per_s_median"] for row in dali["rows"] if row.get("threads") == t["threads"])
        if abs(t["dali"][0] - best) > 1e-6 * best or abs(t["pinfeed_over_dali"] - t["pinfeed"][0] / best) > 1e-9:
            fail(f"{t}: DALI's best load at {t['threads']} threads is {best}")
    if "| 224 | 2 |" not in r.stdout or "x** |" not in r.stdout:
        fail("table:\n" + r.stdout)
    r = subprocess.run([sys.executable, *script, "--pinfeed", ours[0]], capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.count("| n/a | n/a |") != 1:
        fail(f"without DALI: exit {r.returncode}\n{r.stdout}{r.stderr}")
    four = json.loads((repo / "docs" / "data" / "resolution-schedule" / "feed-dali-four-sides.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for size, bench in four["pinfeed_bench"].items():
            paths.append(pathlib.Path(tmp) / f"pinfeed-{size}.json")
            paths[-1].write_text(json.dumps(bench))
        loop, out = pathlib.Path(tmp) / "loop.json", pathlib.Path(tmp) / "feed.json"
        loop.write_text(json.dumps(four["python_loop"]))
        r = subprocess.run([sys.executable, *script, "--pinfeed", *map(str, paths), "--loop", str(loop), "--json",
                            str(out)], capture_output=True, text=True)
        if r.returncode != 0 or json.loads(out.read_text()) != four["table"]:
            fail(f"four sides: exit {r.returncode}\n{r.stdout}{r.stderr}")
    dali = {(row["image_size"], row["threads"]): row["samples_per_s"] for row in four["python_loop"]["rows"]
            if row["feed"] == "dali_mixed_0.99"}
    for t in four["table"]:
        if t["dali"][0] != dali[(t["image_size"], t["threads"])] or t["dali_compile_mode"] != "reduce-overhead":
            fail(f"four sides: {t} is not the loop's DALI row")
    check_parts_removed(repo)
    check_import_ab(repo)
    print("ok")


def check_parts_removed(repo):
    """Each share in docs/resolution-schedule.md's table of the feed without its parts is dual_stream over the same
    process's gpu_resident row, to one decimal, rounds joined by ' / ' in the order of their runs."""
    runs = json.loads((repo / "docs" / "data" / "resolution-schedule" / "probes.json").read_text())
    runs = runs["parts_removed"]["runs"]
    rows = doc_table(repo / "docs" / "resolution-schedule.md", "| px | as built | without the crop kernel |")
    if [r[0] for r in rows] != ["224", "160", "128"]:
        fail(f"parts removed: rows {rows}")
    for px, *cells in rows:
        for cell, variant in zip(cells, ("built", "nocrop", "nodecode", "neither")):
            keys = sorted(k for k in runs if k.split("-")[:2] == [px, variant])
            shares = [100 * runs[k]["dual_stream"]["samples_per_s"] / runs[k]["gpu_resident"]["samples_per_s"]
                      for k in keys]
            want = " / ".join(f"{v:.1f}" for v in shares) + "%"
            if not keys or not cell.replace("**", "").startswith(want):
                fail(f"parts removed, {px} px {variant}: the doc has {cell!r}, the runs {want}")


def check_import_ab(repo):
    """docs/python-module.md's table of the loop's step with and without `import pinfeed`: each process's rate in
    the order the processes ran, and the ratio of the medians, from loop-ceiling.json."""
    ab = json.loads((repo / "docs" / "data" / "python-module" / "loop-ceiling.json").read_text())["import_ab"]
    rows = doc_table(repo / "docs" / "python-module.md", "| px | with `import pinfeed` | without |")
    if [r[0] for r in rows] != ["224", "160"]:
        fail(f"import A/B: rows {rows}")
    for px, *cells in rows:
        want = [" / ".join(f"{r['samples_per_s']:,.0f}" for p in ab["processes"] if p["variant"] == v
                           for r in p["rows"] if r["image_size"] == int(px))
                for v in ("with", "without", "without-bare")]
        ratio = ab["summary"][px]["with_over_without"]
        if cells[:3] != want or abs(float(cells[3]) - ratio) > 0.0051:
            fail(f"import A/B, {px} px: the doc has {cells}, the runs {want}")


if __name__ == "__main__":
    main()

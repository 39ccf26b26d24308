"""`scripts/tables.py feed`: one row per (image size, threads), pinfeed's share of the gpu_resident row of its own
bench, DALI's best hw_decoder_load at the same threads (reference_dali.py --sweep files, made up here) and the ratio
of the medians; a point DALI did not run shows n/a. With --loop (DALI's rows from scripts/bench_python_feed.py), the
resolution schedule's four-side table in docs/ is what it gives from the raw data kept beside it.

Usage: check_feed_table.py REPO_ROOT.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import doc_table, fail


def bench(size, workers, feed, ceiling):
    """A `pinfeed bench` bench.json of one point: dual_stream and gpu_resident rows, two repeats each."""
    rows = [{"mode": mode, "samples_per_s": values, "samples_per_s_median": sum(values) / 2}
            for mode, values in (("dual_stream", feed), ("gpu_resident", ceiling))]
    return {"meta": {"image_size": size, "workers": workers}, "rows": rows}


def dali(size, points):
    """A reference_dali.py --sweep JSON: {(threads, load): repeats}, and its gpu_resident row."""
    rows = [{"mode": f"dali_mixed_t{t}_hw{load}", "threads": t, "hw_decoder_load": load, "samples_per_s": values}
            for (t, load), values in points.items()]
    rows.append({"mode": "gpu_resident", "samples_per_s": [9000.0, 9100.0]})
    return {"meta": {"image_size": size, "compile_mode": "default"}, "rows": rows}


def main():
    repo = pathlib.Path(sys.argv[1])
    script = [str(repo / "scripts" / "tables.py"), "feed"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        files = {"224-2": bench(224, 2, [7500.0, 7540.0, 7520.0], [7800.0, 7760.0, 7780.0]),
                 "224-4": bench(224, 4, [7490.0, 7510.0, 7500.0], [7740.0, 7750.0, 7745.0]),
                 "160-2": bench(160, 2, [12400.0, 12480.0, 12440.0], [13100.0, 13110.0, 13105.0])}
        ours = []
        for name, doc in files.items():
            ours.append(tmp / f"pinfeed-{name}.json")
            ours[-1].write_text(json.dumps(doc))
        theirs = tmp / "dali-224.json"  # no DALI file at 160 px: that row shows n/a
        theirs.write_text(json.dumps(dali(224, {(2, 0.65): [4300.0, 4400.0], (2, 0.99): [6320.0, 6440.0],
                                                (4, 0.65): [6700.0, 6340.0], (4, 0.99): [6520.0, 6420.0]})))
        out = tmp / "feed.json"
        r = subprocess.run([sys.executable, *script, "--pinfeed", *map(str, ours), "--dali", str(theirs), "--json",
                            str(out)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"exit {r.returncode}\n{r.stdout}{r.stderr}")
        table = json.loads(out.read_text())
        if [(t["image_size"], t["threads"]) for t in table] != [(224, 2), (224, 4), (160, 2)]:
            fail(f"rows: {[(t['image_size'], t['threads']) for t in table]}")
        want = {(224, 2): (7520.0, 7780.0, 6380.0, 0.99), (224, 4): (7500.0, 7745.0, 6520.0, 0.65),
                (160, 2): (12440.0, 13105.0, None, None)}
        for t in table:
            feed, ceiling, best, load = want[(t["image_size"], t["threads"])]
            if t["pinfeed"][0] != feed or abs(t["share_of_ceiling"] - feed / ceiling) > 1e-12:
                fail(f"{t}: pinfeed's median or its share of the same bench's gpu_resident row")
            if best is None:
                if t["dali"] is not None or t["pinfeed_over_dali"] is not None:
                    fail(f"{t}: DALI did not run at 160 px")
            elif t["dali"][0] != best or t["dali_hw_decoder_load"] != load or \
                    abs(t["pinfeed_over_dali"] - feed / best) > 1e-12:
                fail(f"{t}: DALI's best load at {t['threads']} threads is {load} ({best})")
        if "| 224 | 2 |" not in r.stdout or "x** |" not in r.stdout or r.stdout.count("| n/a | n/a |") != 1:
            fail("table:\n" + r.stdout)
    check_four_sides(repo, script)
    print("ok")


def check_four_sides(repo, script):
    """docs/resolution-schedule.md's table against DALI at four sides, from feed-dali-four-sides.json: each side's
    bench.json and the loop's JSON give the table it keeps, and the page's rows are that table."""
    four = json.loads((repo / "docs" / "data" / "resolution-schedule" / "feed-dali-four-sides.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for size, doc in four["pinfeed_bench"].items():
            paths.append(pathlib.Path(tmp) / f"pinfeed-{size}.json")
            paths[-1].write_text(json.dumps(doc))
        loop, out = pathlib.Path(tmp) / "loop.json", pathlib.Path(tmp) / "feed.json"
        loop.write_text(json.dumps(four["python_loop"]))
        r = subprocess.run([sys.executable, *script, "--pinfeed", *map(str, paths), "--loop", str(loop), "--json",
                            str(out)], capture_output=True, text=True)
        if r.returncode != 0 or json.loads(out.read_text()) != four["table"]:
            fail(f"four sides: exit {r.returncode}\n{r.stdout}{r.stderr}")
    dali_rows = {(row["image_size"], row["threads"]): row["samples_per_s"] for row in four["python_loop"]["rows"]
                 if row["feed"] == "dali_mixed_0.99"}
    for t in four["table"]:
        if t["dali"][0] != dali_rows[(t["image_size"], t["threads"])] or t["dali_compile_mode"] != "reduce-overhead":
            fail(f"four sides: {t} is not the loop's DALI row")
    rows = doc_table(repo / "docs" / "resolution-schedule.md", "| px | CPU threads | pinfeed nvJPEG | % of pinfeed's")
    for t, cells in zip(four["table"], rows):
        want = [str(t["image_size"]), str(t["threads"]), f"{t['pinfeed'][0]:,.0f}",
                f"{100 * t['share_of_ceiling']:.1f}% ({t['ceiling']:,.0f})", f"{t['decode_alone']:,.0f}",
                f"{t['dali'][0]:,.0f}"]
        if cells[:6] != want or f"{t['pinfeed_over_dali']:.2f}x" not in cells[-1]:
            fail(f"four sides, {t['image_size']} px: the page has {cells}, the raw data {want}")
    if len(rows) != len(four["table"]):
        fail(f"four sides: {len(rows)} rows on the page, {len(four['table'])} in the raw data")


if __name__ == "__main__":
    main()

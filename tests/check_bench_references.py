"""`pinfeed bench --reference` with several files, and the variant options of the Python peers:

- every --reference file is read and checked before anything runs: a missing file, one that is not JSON and one
  whose row lacks a figure stop the bench at once (exit 2, naming the file and the row; no output folder made);
- several files join the one table, bench.csv and bench.json ("references"), each reference row labelled by its
  implementation and precision ("pytorch tf32", "pytorch+compile bf16"; a file of an older reference_pytorch.py
  by its meta's precision), the file added where two files share a label; one file still writes reference_meta;
- scripts/reference_pytorch.py refuses fp16, the CUDA-only modes and an unknown mode on --device cpu (exit 2)
  before anything runs, without torchvision; reference_dali.py takes --compile and fp16 (float16 from DALI);
- with torchvision importable, a CPU run of reference_pytorch.py writes rows that the bench takes as a reference.

Usage: check_bench_references.py PINFEED_EXE REPO_ROOT.
"""
import contextlib
import io
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail, gen_data


def reference(implementation, precision, modes=("pageable",), row_fields=True):
    """A --reference file as the Python peers write it; without row_fields, as reference_pytorch.py did before
    rows named their variant (precision in meta only)."""
    rows = []
    for m in modes:
        row = {"implementation": implementation, "mode": m, "mode_ran": m, "samples_per_s": [10.0, 12.0],
               "wait_ms_p50": [1.0, 1.0], "wait_ms_mean": [1.5, None], "gpu_idle": [0.1, 0.2], "h2d_ms_mean": [None, None],
               "samples_per_s_median": 11.0, "wait_ms_p50_median": 1.0, "wait_ms_mean_median": 1.5,
               "gpu_idle_median": 0.15, "h2d_ms_median": None}
        if row_fields:
            row.update({"compile": "+compile" in implementation, "precision": precision})
        rows.append(row)
    return {"meta": {"implementation": implementation.split("+")[0], "precision": precision}, "rows": rows}


def run_main(main, argv):
    """main(argv) with its output caught: the exit code (SystemExit's; 0 when it returns), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def main():
    exe, repo = sys.argv[1], pathlib.Path(sys.argv[2])
    scripts = repo / "scripts"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        data = tmp / "data"
        gen_data(exe, data, 2, 6, 1, "40x32")
        config = tmp / "bench.toml"
        config.write_text(f'[data]\nroot = "{data}"\nimage_size = 32\nworkers = 1\n[train]\ndevice = "cpu"\n'
                          'batch_size = 4\nprecision = "fp32"\nchannels_last = false\n')

        def bench(out, refs):
            cmd = [exe, "bench", "--config", str(config), "--modes", "pageable", "--repeats", "1", "--warmup", "1",
                   "--steps", "2", "--out", str(out)]
            for r in refs:
                cmd += ["--reference", str(r)]
            return subprocess.run(cmd, capture_output=True, text=True)

        def write(name, doc):
            path = tmp / name
            path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
            return path

        # 1. A bad file among good ones stops the bench before it starts.
        good = write("eager.json", reference("pytorch", "tf32"))
        no_median = reference("pytorch", "tf32", modes=("pageable", "pinned"))
        del no_median["rows"][1]["gpu_idle_median"]
        short = reference("pytorch", "tf32")
        short["rows"][0]["wait_ms_p50"] = [1.0]
        for name, doc, expected in [
                ("missing.json", None, "missing.json: cannot open"),
                ("truncated.json", '{"meta": {}, "rows": [', "truncated.json: not JSON"),
                ("no_rows.json", {"meta": {}}, 'no_rows.json: no "rows" array'),
                ("no_median.json", no_median, 'no_median.json: row 1 (pinned): "gpu_idle_median" is missing'),
                ("short.json", short, 'short.json: row 0 (pageable): "wait_ms_p50" is not an array')]:
            path = tmp / name if doc is None else write(name, doc)
            out = tmp / ("out-" + name)
            r = bench(out, [good, path])
            if r.returncode != 2 or expected not in r.stderr or out.exists():
                fail(f"--reference {name}: exit {r.returncode}, output folder made: {out.exists()}\n{r.stderr}")

        # 2. Several files in one table, each row labelled by its variant.
        (tmp / "a").mkdir()
        (tmp / "b").mkdir()
        older = write("a/reference.json", reference("pytorch", "tf32", row_fields=False))
        compiled = write("compile.json", reference("pytorch+compile", "bf16", modes=("pageable", "gpu_resident")))
        twin = write("b/reference.json", reference("pytorch", "tf32"))
        out = tmp / "several"
        r = bench(out, [older, compiled, twin])
        if r.returncode != 0:
            fail(f"three references: exit {r.returncode}\n{r.stderr}")
        table = (out / "table.md").read_text()
        for line in ["| pinfeed | pageable |", "| pytorch+compile bf16 | pageable |",
                     "| pytorch+compile bf16 | gpu_resident |", f"| pytorch tf32 ({older}) | pageable |",
                     f"| pytorch tf32 ({twin}) | pageable |"]:
            if line not in table:
                fail(f"no line {line!r} in table.md:\n{table}")
        csv = (out / "bench.csv").read_text()
        if "\npytorch+compile bf16,gpu_resident,2," not in csv:
            fail(f"bench.csv:\n{csv}")
        doc = json.loads((out / "bench.json").read_text())
        refs = doc.get("references", [])
        if [ref["file"] for ref in refs] != [str(older), str(compiled), str(twin)] or "reference_meta" in doc:
            fail(f"bench.json: references {[ref.get('file') for ref in refs]}, reference_meta {'reference_meta' in doc}")
        if refs[1]["rows"][0]["variant"] != "pytorch+compile bf16" or refs[1]["meta"]["precision"] != "bf16":
            fail(f"bench.json: {refs[1]}")
        if [row["implementation"] for row in doc["rows"]] != ["pinfeed"]:
            fail(f"bench.json rows: {doc['rows']}")

        # 3. The Python peers' options, checked before anything runs (torch, no torchvision needed): main() in this
        # process, as `python reference_pytorch.py ARGS` runs it (one interpreter, one import of torch, for all).
        script = scripts / "reference_pytorch.py"
        sys.path.insert(0, str(scripts))
        import reference_dali
        import reference_pytorch
        code, out, err = run_main(reference_pytorch.main, ["--help"])
        if code != 0 or "--compile" not in out or "fp16" not in out:
            fail(f"reference_pytorch.py --help: exit {code}\n{out}{err}")
        for extra, expected in [(["--precision", "fp16"], "fp16 needs CUDA"),
                                (["--modes", "pageable,dual_stream"], "not dual_stream"),
                                (["--modes", "pageable,pinnned"], "unknown mode 'pinnned'")]:
            code, _, err = run_main(reference_pytorch.main, ["--data", str(data), "--out", str(tmp / "x.json"),
                                                             "--device", "cpu"] + extra)
            if code != 2 or expected not in err:
                fail(f"reference_pytorch.py {' '.join(extra)}: exit {code}\n{err}")
        if "torchvision" in sys.modules:
            fail("reference_pytorch.py imported torchvision before refusing its options")
        args = reference_pytorch.parse_args(["--data", "x", "--out", "y", "--compile", "--precision", "fp16"])
        if not args.compile or reference_pytorch.variant("pytorch", args) != "pytorch+compile":
            fail(f"reference_pytorch.py --compile: {args}")
        args = reference_dali.parse_args(["--root", "x", "--out", "y", "--compile", "--precision", "fp16"])
        if not args.compile or args.dtype != "float16" or reference_pytorch.variant("dali", args) != "dali+compile":
            fail(f"reference_dali.py --compile --precision fp16: compile {args.compile}, dtype {args.dtype}")

        # 4. A real reference_pytorch.py file, where torchvision is there.
        try:
            import torchvision  # noqa: F401
        except ImportError:
            print("torchvision is not importable: the reference_pytorch.py run is skipped")
            print("OK")
            return 0
        ref = tmp / "real.json"
        subprocess.run([sys.executable, str(script), "--data", str(data), "--out", str(ref), "--device", "cpu",
                        "--modes", "pageable,gpu_resident", "--precision", "fp32", "--batch-size", "4",
                        "--image-size", "32", "--workers", "1", "--repeats", "1", "--warmup", "1", "--steps", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        out = tmp / "real"
        r = bench(out, [ref])
        if r.returncode != 0:
            fail(f"reference_pytorch.py's file: exit {r.returncode}\n{r.stderr}")
        table = (out / "table.md").read_text()
        doc = json.loads((out / "bench.json").read_text())
        if "| pytorch fp32 | gpu_resident |" not in table or doc.get("reference_meta", {}).get("compile") is not False:
            fail(f"reference_pytorch.py's file in the table:\n{table}\nreference_meta {doc.get('reference_meta')}")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

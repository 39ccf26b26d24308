"""scripts/reference_dali.py without a GPU: its help and options work without DALI, --sweep makes
the threads x decoder grid (mixed at each hw_decoder_load, cpu once), --device cpu refuses the mixed decoder, and
without an importable DALI it exits 3 with the pip command to run instead of a traceback.

Usage: check_reference_dali.py REPO_ROOT.
"""
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail


def main():
    repo = pathlib.Path(sys.argv[1])
    script = repo / "scripts" / "reference_dali.py"
    sys.path.insert(0, str(repo / "scripts"))
    import reference_dali as rd

    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    if r.returncode != 0 or "--sweep" not in r.stdout or "hw_decoder_load" not in r.stdout:
        fail(f"--help: exit {r.returncode}\n{r.stdout}{r.stderr}")

    args = rd.parse_args(["--root", "x", "--out", "y.json", "--sweep"])
    expected = {(d, t, hw) for t in (1, 2, 4, 8, 13) for d, hw in (("mixed", 0.65), ("mixed", 0.99), ("cpu", None))}
    if set(args.points) != expected or len(args.points) != 15 or (args.warmup, args.steps) != (10, 40):
        fail(f"sweep points {args.points}, warm-up {args.warmup}, steps {args.steps}")
    one = rd.parse_args(["--root", "x", "--out", "y.json", "--decoder", "cpu", "--threads", "4"])
    if one.points != [("cpu", 4, None)] or one.dtype != "float16" or not one.channels_last or one.steps != 100:
        fail(f"single point {one.points}, dtype {one.dtype}, channels_last {one.channels_last}")
    if rd.parse_args(["--root", "x", "--out", "y", "--precision", "tf32"]).dtype != "float":
        fail("tf32 without --dtype should ask DALI for float32")

    r = subprocess.run([sys.executable, str(script), "--root", "x", "--out", "y", "--device", "cpu"],
                       capture_output=True, text=True)
    if r.returncode != 2 or "mixed decoder needs a GPU" not in r.stderr:
        fail(f"--device cpu with the mixed decoder: exit {r.returncode}\n{r.stderr}")

    with tempfile.TemporaryDirectory() as tmp:
        fake = pathlib.Path(tmp) / "nvidia"  # shadows any installed nvidia.* package: DALI cannot import
        fake.mkdir()
        (fake / "__init__.py").write_text("raise ImportError('simulated: no DALI here')\n")
        r = subprocess.run([sys.executable, str(script), "--root", tmp, "--out", str(pathlib.Path(tmp) / "o.json")],
                           capture_output=True, text=True, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"})
        if r.returncode != rd.EXIT_NO_DALI or "pip install nvidia-dali" not in r.stderr or "Traceback" in r.stderr:
            fail(f"without DALI: exit {r.returncode}\n{r.stderr}")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

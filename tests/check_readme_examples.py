"""README.md's examples that run on a CPU, run as written, in order, in an empty folder that holds the repository's
configs/ and the built build/app/pinfeed: each shell block the README marks with `<!-- readme-example: cpu -->`
on the line before it. Every other block of the README must be in NOT_RUN, with the reason it is not run here.

What is changed, and only this:
- placeholders: /data/mine is a folder of this test's (the README's gen-data line fills it); runs/<run> is the newest
  run folder when the line runs; photo.jpg is one of the generated validation images, photos/ a folder of two more.
- `python` is this Python, with the built module (BUILD/python) on PYTHONPATH, as `pip install .` would give it.
- a `pinfeed train` line gets SMALL appended (2 steps per epoch at 32 px on the CPU, no warm-up) and train.epochs=1, a resume
  line one epoch more than the run has, so that each takes seconds; a `pinfeed gen-data` line gets GEN_DATA (a few
  images per class).
Each line must exit 0 and print something.

Usage: check_readme_examples.py PINFEED_EXE REPO BUILD. Exits 77 (ctest: skipped) without torch.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from check_common import fail, skip_without

MARK = "<!-- readme-example: cpu -->"
# The README's other blocks, by their first line's start, and why they are not run here.
NOT_RUN = {
    "scripts/train.sh": "sets up the machine and builds (minutes; apt-get needs root)",
    "/data/mine/train/<class>": "a folder layout, not commands",
    "$(cat build/.venv_path)/bin/torchrun": "ImageNet on 8 GPUs",
    "import torch, torchvision, pinfeed": "a training loop on CUDA over ImageNet",
    "for images, labels in pinfeed.watch(train_loader)": "a fragment of the user's own loop (tests/python/test_watch.py runs watch)",
}
SKIP_LINES = {
    "tensorboard --logdir": "starts TensorBoard's server, which runs until stopped",
}
SMALL = ["train.max_steps_per_epoch=2", "train.batch_size=8", "data.image_size=32", "data.workers=1", "train.device=cpu",
         "pipeline.warmup_steps=0", "train.warmup_epochs=0"]
GEN_DATA = ["--train-per-class", "8", "--val-per-class", "2", "--threads", "1"]


def blocks(readme):
    """(marked, first line, lines) of each fenced block; a line ending in a backslash joined to the next."""
    lines, out, i = readme.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            marked = any(lines[j].strip() == MARK for j in range(max(0, i - 2), i))
            body, i = [], i + 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            joined = []
            for line in body:
                if joined and joined[-1].endswith("\\"):
                    joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
                else:
                    joined.append(line)
            out.append((marked, next((b for b in body if b.strip()), ""), [b for b in joined if b.strip()]))
        i += 1
    return out


def newest_run(work):
    runs = sorted((p for p in (work / "runs").glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if not runs:
        fail("a line names runs/<run> before any run folder exists")
    return "runs/" + runs[-1].name


def with_placeholders(line, work):
    line = line.replace("/data/mine", str(work / "data/mine"))
    if "runs/<run>" in line:
        line = line.replace("runs/<run>", newest_run(work))
    return line


def command(line, work):
    """The shell line to run: placeholders filled, the small run's settings appended."""
    code, _, comment = line.partition("  #")
    code = with_placeholders(code.strip(), work)
    if re.match(r"build/app/pinfeed train\b", code) and "--help" not in code:
        epochs = 1
        if "--resume" in code:  # one more epoch than the run has
            epochs += len((work / newest_run(work) / "metrics.jsonl").read_text().splitlines())
        code += " " + " ".join(SMALL + [f"train.epochs={epochs}"])
    elif re.match(r"build/app/pinfeed gen-data\b", code):
        code += " " + " ".join(GEN_DATA)
    return code


def main():
    exe, repo, build = (pathlib.Path(a).resolve() for a in sys.argv[1:4])
    with skip_without():
        import torch  # noqa: F401  (the python lines)
    readme = (repo / "README.md").read_text()
    found = blocks(readme)
    for marked, first, _ in found:
        if not marked and not any(first.startswith(k) for k in NOT_RUN):
            fail(f"README.md's block starting {first!r} is neither marked {MARK} nor listed in NOT_RUN")
    lines = [line for marked, _, body in found if marked for line in body]
    if not any("pinfeed train" in line for line in lines):
        fail("no marked block trains: the README's examples moved?")
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        (work / "build/app").mkdir(parents=True)
        (work / "build/app/pinfeed").symlink_to(exe)
        (work / "configs").symlink_to(repo / "configs")
        (work / "python/pinfeed").mkdir(parents=True)
        (work / "python/pinfeed/tensorboard.py").symlink_to(repo / "python/pinfeed/tensorboard.py")
        (work / "data").mkdir()
        bin_dir = work / ".bin"
        bin_dir.mkdir()
        (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # a venv's python, not a link
        (bin_dir / "python").chmod(0o755)
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                   PYTHONPATH=os.pathsep.join(p for p in (str(build / "python"), os.environ.get("PYTHONPATH")) if p))
        for line in lines:
            if any(line.startswith(k) for k in SKIP_LINES):
                print(f"not run here: {line}")
                continue
            if "photo.jpg" in line and not (work / "photo.jpg").exists():
                images = sorted((work / "data/mine/val").glob("*/*"))
                if len(images) < 3:
                    fail("the README's gen-data line must come before predict's: no validation images")
                shutil.copy(images[0], work / "photo.jpg")
                (work / "photos").mkdir()
                for image in images[-2:]:
                    shutil.copy(image, work / "photos" / image.name)
            cmd = command(line, work)
            start = time.monotonic()
            r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True)
            print(f"[{time.monotonic() - start:5.1f} s, exit {r.returncode}] {cmd}")
            if r.returncode != 0:
                fail(f"README.md's line\n  {line}\nran as\n  {cmd}\nexit {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
            if not (r.stdout + r.stderr).strip():
                fail(f"{line}: printed nothing")
    print(f"ok: {len(lines)} lines of README.md")


if __name__ == "__main__":
    main()

"""python/pinfeed/tensorboard.py, run as a plain file (no compiled pinfeed module), on hand-made run folders:
each numeric figure of metrics.jsonl becomes a scalar at step = epoch under its tag (nulls, text and bools left
out), read back through TensorBoard's EventAccumulator; a second conversion after a resume rewrote an epoch's row
shows each epoch once, with the new values; --follow reads rows appended while it runs and stops at the run's
final: line, or when the run's process is gone; without the tensorboard package: one line, exit 2.

Usage: check_tensorboard.py REPO. Exits 77 (ctest: skipped) without torch or tensorboard.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

from check_common import fail, skip_without

ROWS = [
    {"epoch": 1, "lr": 0.05, "image_size": 160, "train_loss": 2.5, "val_loss": 2.25, "val_top1": 0.25, "val_top5": 0.75,
     "ema_val_top1": None, "best_weights": "raw", "samples_per_s": 100.5, "wait_ms_p50": 0.125, "gpu_idle": 0.015625,
     "mode": "dual_stream", "workers": 4, "bad_images": 0, "loss_scale": None, "some_new_figure": 7},
    {"epoch": 2, "lr": 0.025, "image_size": 192, "train_loss": 2.0, "val_loss": 2.0, "val_top1": 0.5, "val_top5": 0.875,
     "ema_val_top1": None, "best_weights": None, "samples_per_s": 110.0, "wait_ms_p50": 0.25, "gpu_idle": 0.03125,
     "mode": "dual_stream", "workers": 4, "bad_images": 1, "loss_scale": None, "some_new_figure": 8},
]


def write_rows(path, rows, mode="w"):
    with open(path, mode) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def scalars(logdir):
    """{tag: [(step, value), ...]} of every event file in logdir, purges applied as TensorBoard applies them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expect_series(got, tag, want):
    series = got.get(tag)
    if series is None or [s for s, _ in series] != [s for s, _ in want] or any(
            abs(v - w) > 1e-6 * max(1.0, abs(w)) for (_, v), (_, w) in zip(series, want)):
        fail(f"{tag}: {series}, expected {want}")


def main():
    repo = pathlib.Path(sys.argv[1])
    with skip_without("scripts/setup.sh installs tensorboard into the venv"):
        import torch  # noqa: F401
        import tensorboard  # noqa: F401
    script = repo / "python/pinfeed/tensorboard.py"
    convert = [sys.executable, str(script)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        run = tmp / "runs/20260101-000000-mine"
        run.mkdir(parents=True)
        write_rows(run / "metrics.jsonl", ROWS)
        r = subprocess.run(convert + [str(run)], capture_output=True, text=True, cwd=tmp)
        if r.returncode != 0 or "2 epochs written to" not in r.stdout:
            fail(f"conversion: exit {r.returncode}\n{r.stdout}{r.stderr}")
        got = scalars(run / "tensorboard")
        expect_series(got, "train/loss", [(1, 2.5), (2, 2.0)])
        expect_series(got, "train/lr", [(1, 0.05), (2, 0.025)])
        expect_series(got, "train/image_size", [(1, 160), (2, 192)])
        expect_series(got, "val/top1", [(1, 0.25), (2, 0.5)])
        expect_series(got, "val/top5", [(1, 0.75), (2, 0.875)])
        expect_series(got, "feed/wait_ms_p50", [(1, 0.125), (2, 0.25)])
        expect_series(got, "feed/bad_images", [(1, 0), (2, 1)])
        expect_series(got, "gpu/idle_fraction", [(1, 0.015625), (2, 0.03125)])
        expect_series(got, "other/some_new_figure", [(1, 7), (2, 8)])
        for absent in ("val/ema_top1", "train/loss_scale", "epoch", "other/epoch", "other/mode", "other/best_weights"):
            if absent in got:
                fail(f"{absent} written: {got[absent]}")

        # A resume rewrote epoch 2 and added 3; converted again into the same folder: each epoch once, the new rows.
        time.sleep(1.1)  # event files are ordered by the second in their names
        resumed = [ROWS[0], dict(ROWS[1], train_loss=1.5), dict(ROWS[1], epoch=3, train_loss=1.25)]
        write_rows(run / "metrics.jsonl", resumed)
        r = subprocess.run(convert + [str(run)], capture_output=True, text=True, cwd=tmp)
        if r.returncode != 0:
            fail(f"second conversion: exit {r.returncode}\n{r.stdout}{r.stderr}")
        expect_series(scalars(run / "tensorboard"), "train/loss", [(1, 2.5), (2, 1.5), (3, 1.25)])

        # --follow: rows appended while it runs are read; the final: line ends it.
        live = tmp / "runs/20260101-000001-live"
        live.mkdir()
        (live / "run.json").write_text(json.dumps({"format": 1, "name": "live", "starts": [
            {"host": socket.gethostname(), "pid": os.getpid()}]}))
        (live / "run.log").write_text("2026-01-01 00:00:01 epoch 1/2 ...\n")
        write_rows(live / "metrics.jsonl", ROWS[:1])
        follower = subprocess.Popen(convert + [str(live), "--follow", "--interval", "0.2", "--logdir", str(tmp / "tb")],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)
        if follower.poll() is not None:
            fail(f"--follow stopped while the run was live: {follower.communicate()[0]}")
        with open(live / "metrics.jsonl", "a") as f:  # half a line first, as a reader may see it
            line = json.dumps(ROWS[1]) + "\n"
            f.write(line[:20])
            f.flush()
            time.sleep(0.5)
            f.write(line[20:])
        with open(live / "run.log", "a") as f:
            f.write("2026-01-01 00:00:09 final: epoch 2/2 val_top1 50.00% | best: epoch 2 ...\n")
        try:
            out = follower.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            follower.kill()
            fail("--follow did not stop after the final: line")
        if follower.returncode != 0 or "2 epochs written" not in out:
            fail(f"--follow: exit {follower.returncode}\n{out}")
        expect_series(scalars(tmp / "tb"), "val/top1", [(1, 0.25), (2, 0.5)])

        # --follow of a run whose process is gone (killed: no final: line) reads what is there and stops.
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        (live / "run.json").write_text(json.dumps({"format": 1, "name": "live", "starts": [
            {"host": socket.gethostname(), "pid": gone.pid}]}))
        (live / "run.log").write_text("2026-01-01 00:00:01 epoch 1/2 ...\n")
        r = subprocess.run(convert + [str(live), "--follow", "--interval", "0.2", "--logdir", str(tmp / "tb2")],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or "2 epochs written" not in r.stdout:
            fail(f"--follow of a stopped run: exit {r.returncode}\n{r.stdout}{r.stderr}")

        # Without the tensorboard package: one line saying what to install, exit 2.
        blocker = tmp / "no_tensorboard"
        (blocker / "tensorboard").mkdir(parents=True)
        (blocker / "tensorboard/__init__.py").write_text("raise ImportError('blocked by the test')\n")
        env = dict(os.environ, PYTHONPATH=str(blocker))
        r = subprocess.run(convert + [str(run)], capture_output=True, text=True, env=env)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 2 or len(lines) != 1 or "pip install tensorboard" not in lines[0]:
            fail(f"without tensorboard: exit {r.returncode}\n{r.stdout}{r.stderr}")

        # A folder that is not there: exit 2, naming it.
        r = subprocess.run(convert + [str(tmp / "runs/nope")], capture_output=True, text=True)
        if r.returncode != 2 or "nope" not in r.stderr:
            fail(f"missing run folder: exit {r.returncode}\n{r.stdout}{r.stderr}")
    print("ok")


if __name__ == "__main__":
    main()

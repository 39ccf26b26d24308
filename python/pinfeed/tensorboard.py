"""A pinfeed run's per-epoch metrics (RUN_DIR/metrics.jsonl) as TensorBoard scalars.

    python -m pinfeed.tensorboard RUN_DIR [--logdir OUT] [--follow [--interval S]]
    python python/pinfeed/tensorboard.py RUN_DIR ...       # the same, without the pinfeed module installed
    tensorboard --logdir RUN_DIR/tensorboard

One scalar per numeric figure of each row, at step = epoch (from 1): train/loss, val/top1 (a fraction, as in the
file), feed/wait_ms_p50, gpu/idle_fraction, ... (TAGS below; a figure it does not know goes under other/). Figures
that do not apply (null) are left out. The event files go to OUT (default RUN_DIR/tensorboard); each conversion
hides the points an earlier one wrote there from the first epoch it writes on (TensorBoard's purge_step), so a run
converted twice, or resumed and converted again, shows each epoch once.

--follow keeps reading the rows a live run appends, every --interval seconds (default 5), and stops when the run
ends: run.log's last line is the run's `final:` line, or the process that writes the run (run.json's latest start,
when it ran on this host) no longer exists. Ctrl-C stops it too (exit 130), with what was read written.

Needs torch and the tensorboard package only (torch.utils.tensorboard); it never imports pinfeed's compiled module.
Exit codes: 0 done, 2 usage (no such run folder, no tensorboard package).
"""
import argparse
import json
import os
import socket
import sys
import time

# Run as a file (python .../pinfeed/tensorboard.py), this file's folder comes first on sys.path, where it would stand
# in for the tensorboard package that torch.utils.tensorboard imports.
if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

# metrics.jsonl's figures (`pinfeed help metrics`) and their tags. Left out: epoch (the step), and the text
# figures mode and best_weights.
TAGS = {
    "train_loss": "train/loss",
    "lr": "train/lr",
    "image_size": "train/image_size",
    "samples_per_s": "train/samples_per_s",
    "global_samples_per_s": "train/global_samples_per_s",
    "samples_per_s_min": "train/samples_per_s_min",
    "samples_per_s_max": "train/samples_per_s_max",
    "steps": "train/steps",
    "warmup_steps": "train/warmup_steps",
    "loss_scale": "train/loss_scale",
    "skipped_steps": "train/skipped_steps",
    "world_size": "train/world_size",
    "val_loss": "val/loss",
    "val_top1": "val/top1",
    "val_top5": "val/top5",
    "ema_val_loss": "val/ema_loss",
    "ema_val_top1": "val/ema_top1",
    "ema_val_top5": "val/ema_top5",
    "wait_ms_mean": "feed/wait_ms_mean",
    "wait_ms_p50": "feed/wait_ms_p50",
    "wait_ms_p95": "feed/wait_ms_p95",
    "wait_ms_mean_min": "feed/wait_ms_mean_min",
    "wait_ms_mean_max": "feed/wait_ms_mean_max",
    "loader_ms_mean": "feed/loader_ms_mean",
    "ahead_ms_mean": "feed/ahead_ms_mean",
    "h2d_ms_mean": "feed/h2d_ms_mean",
    "workers": "feed/workers",
    "pinned_mb": "feed/pinned_mb",
    "bad_images": "feed/bad_images",
    "gpu_idle": "gpu/idle_fraction",
    "gpu_idle_min": "gpu/idle_fraction_min",
    "gpu_idle_max": "gpu/idle_fraction_max",
    "compute_ms_mean": "gpu/compute_ms_mean",
    "epoch_s": "time/epoch_s",
    "wall_s": "time/wall_s",
    "eval_s": "time/eval_s",
    "capture_s": "time/capture_s",
    "host_rss_mb": "host/rss_mb",
}


def scalars(row):
    """(tag, value) of each numeric figure of one metrics.jsonl row (no epoch, no text, no null, no bool)."""
    for name, value in row.items():
        if name == "epoch" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        yield TAGS.get(name, "other/" + name), value


class Converter:
    """Writes each new epoch's row; a row for an epoch written before (a resume's rewritten rows) hides the points
    from that epoch on and writes again."""

    def __init__(self, logdir, summary_writer):
        self.logdir, self.make_writer = logdir, summary_writer
        self.writer, self.rows = None, {}

    def add(self, row):
        epoch = row.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or self.rows.get(epoch) == row:
            return False
        if self.writer is None or epoch in self.rows:
            if self.writer is not None:
                self.writer.close()
            self.writer = self.make_writer(self.logdir, purge_step=epoch)
            self.rows = {e: r for e, r in self.rows.items() if e < epoch}
        for tag, value in scalars(row):
            self.writer.add_scalar(tag, value, global_step=epoch)
        self.rows[epoch] = row
        return True

    def flush(self):
        if self.writer is not None:
            self.writer.flush()

    def close(self):
        if self.writer is not None:
            self.writer.close()


class JsonlTail:
    """The whole lines appended to a file since the last read; starts over when the file shrinks (a resume drops the
    rows past its checkpoint)."""

    def __init__(self, path):
        self.path, self.offset, self.partial = path, 0, b""

    def read(self):
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset, self.partial = 0, b""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        rows = []
        for line in lines:
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    print(f"pinfeed.tensorboard: {self.path}: skipped a line that is not JSON", file=sys.stderr)
        return rows


def run_ended(run_dir):
    """True when run.log's last line is the run's final: line, or the process of run.json's latest start ran on this
    host and is gone."""
    try:
        with open(os.path.join(run_dir, "run.log"), "rb") as f:
            f.seek(max(0, os.path.getsize(f.name) - 4096))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
        if lines and "final: epoch" in lines[-1]:
            return True
    except OSError:
        pass
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            start = json.load(f)["starts"][-1]
        if start.get("host") != socket.gethostname():
            return False
        os.kill(int(start["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass
    return False


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pinfeed.tensorboard",
                                     description="Write a pinfeed run's metrics.jsonl as TensorBoard scalars.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run folder, runs/<timestamp>-<run.name>")
    parser.add_argument("--logdir", metavar="OUT", help="where the event files go (default: RUN_DIR/tensorboard)")
    parser.add_argument("--follow", action="store_true",
                        help="keep reading new rows until the run ends (run.log's final: line, or its process gone)")
    parser.add_argument("--interval", type=float, default=5.0, metavar="S",
                        help="--follow: seconds between reads (default: 5)")
    args = parser.parse_args(argv)
    metrics = os.path.join(args.run_dir, "metrics.jsonl")
    if not os.path.isdir(args.run_dir):
        print(f"error: {args.run_dir}: no such run folder", file=sys.stderr)
        return 2
    if not args.follow and not os.path.isfile(metrics):
        print(f"error: {metrics}: no such file (a run writes it after its first epoch)", file=sys.stderr)
        return 2
    if args.interval <= 0:
        print("error: --interval must be above 0 seconds", file=sys.stderr)
        return 2
    try:
        import tensorboard  # noqa: F401  (torch.utils.tensorboard's own message is less direct)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("error: the tensorboard package is missing: pip install tensorboard", file=sys.stderr)
        return 2
    logdir = args.logdir or os.path.join(args.run_dir, "tensorboard")
    converter, tail, epochs = Converter(logdir, SummaryWriter), JsonlTail(metrics), 0
    try:
        while True:
            ended = args.follow and run_ended(args.run_dir)  # before the read: rows written until then are read
            for row in tail.read():
                epochs += converter.add(row)
            converter.flush()
            if not args.follow or ended:
                break
            time.sleep(args.interval)
    except KeyboardInterrupt:
        converter.close()
        print(f"pinfeed.tensorboard: stopped; {epochs} epochs written to {logdir}", file=sys.stderr)
        return 130
    converter.close()
    print(f"pinfeed.tensorboard: {epochs} epochs written to {logdir} (tensorboard --logdir {logdir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

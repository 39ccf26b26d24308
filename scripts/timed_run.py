#!/usr/bin/env python3
"""Runs a trainer and stamps each line of its per-epoch metrics file with the seconds since its launch.

    timed_run.py --metrics 'RUN_DIR/*/metrics.jsonl' --out timed.jsonl -- pinfeed train -c CONFIG ...

The same clock for every trainer, read from outside: `launch_s` is the time from just before the process starts
(its start-up, data scans, compilation and CUDA graph captures included) to the moment its epoch's line appears
in the file (polled every --poll-s seconds; a line written in the last poll before the process exits is stamped
at its exit). The metrics file may not exist yet at launch (pinfeed makes its run folder first): --metrics is a
glob, and the newest file that matches it is followed. Exit code: the command's; 2 when the file never appeared.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time


def newest(pattern):
    paths = glob.glob(pattern)
    return max(paths, key=os.path.getmtime) if paths else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics", required=True, help="glob of the JSON lines file the command writes, one per epoch")
    p.add_argument("--out", required=True, help="the same lines, each with launch_s added")
    p.add_argument("--poll-s", type=float, default=0.05)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command after --")
    t0 = time.perf_counter()
    proc = subprocess.Popen(command)
    path, offset, pending, rows = None, 0, "", 0
    with open(args.out, "w") as out:
        def collect():
            nonlocal path, offset, pending, rows
            path = path or newest(args.metrics)
            if path is None:
                return
            now = time.perf_counter() - t0
            with open(path) as f:
                f.seek(offset)
                text = f.read()
                offset = f.tell()
            pending += text
            *lines, pending = pending.split("\n")
            for line in lines:
                if line.strip():
                    row = json.loads(line)
                    row["launch_s"] = now
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    rows += 1
        try:
            while proc.poll() is None:
                collect()
                time.sleep(args.poll_s)
        except KeyboardInterrupt:  # the command got the same signal: let it finish its own way
            proc.wait()
        collect()
        total = time.perf_counter() - t0
    print(f"[timed_run] {rows} epoch line(s) from {path or args.metrics}; the process ran {total:.1f} s, exit "
          f"{proc.returncode}", file=sys.stderr)
    if path is None:
        print(f"error: no file matched {args.metrics}", file=sys.stderr)
        return proc.returncode or 2
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

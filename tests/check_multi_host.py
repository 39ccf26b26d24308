"""Several hosts as torchrun starts them: two launchers (--nnodes 2, one process each) meet through torchrun's
c10d rendezvous on this host, as two machines would through HOST:PORT, and train one run with Gloo on the CPU:
both exit 0, rank 0 alone writes the run folder (its checkpoint records 2 ranks), and `--resume last` through two
launchers again continues that run at its next epoch (docs/multi-gpu.md#several-hosts).

Usage: check_multi_host.py PINFEED_EXE (torchrun: this Python's torch.distributed.run). Exits 77 (ctest: skipped) without torch.
"""
import pathlib
import socket
import subprocess
import sys
import tempfile

from check_common import fail, gen_data, skip_without, tiny_config


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_launchers(python, exe, tmp, *args):
    """Both launchers' exit codes and outputs, started together as two hosts' would be."""
    port = free_port()
    cmd = [python, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"pinfeed-{port}", "--no-python", str(exe), *args]
    procs = [subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail("two launchers did not finish within 240 s")
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            fail(f"a launcher exited {p.returncode}:\n{out}")
    return "\n".join(outs)


def main():
    exe, python = sys.argv[1], sys.executable
    with skip_without("torchrun comes with torch"):
        import torch
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        gen_data(exe, tmp / "data", 2, 8, 2, "40x40")
        config = tiny_config(tmp / "tiny.toml", tmp / "data", tmp / "runs", 2, name="hosts")
        out = two_launchers(python, exe, tmp, "train", "-c", config)
        if "2 ranks (global batch 4)" not in out:
            fail(f"the run did not train with 2 ranks:\n{out}")
        runs = list((tmp / "runs").iterdir())
        if len(runs) != 1:
            fail(f"expected one run folder (rank 0's), found {[r.name for r in runs]}")
        ck = torch.load(runs[0] / "last.pt", weights_only=True)
        if ck["world_size"] != 2 or ck["epoch"] != 1:
            fail(f"last.pt: world_size {ck['world_size']}, epoch {ck['epoch']}")
        two_launchers(python, exe, tmp, "train", "-c", config, "--resume", "last", "train.epochs=2")
        ck = torch.load(runs[0] / "last.pt", weights_only=True)
        if ck["epoch"] != 2 or len(list((tmp / "runs").iterdir())) != 1:
            fail(f"--resume last through two launchers: last.pt at epoch {ck['epoch']}")
        print("two launchers: one run of 2 ranks, rank 0's folder, resumed at epoch 2")


if __name__ == "__main__":
    main()

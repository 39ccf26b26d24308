"""The torchvision side of the accuracy comparison follows pinfeed's recipe:

- scripts/reference_train.py reads configs/parity_resnet50.toml plus overrides into the same values that
  `pinfeed train` resolves (its run folder's config.toml), every key pinfeed has, defaults included (asked of the
  executable: `pinfeed help config --json`); unknown keys and wrong types are refused, and so is every config
  when no pinfeed runs (exit 2, naming PINFEED_BIN);
- its learning rate per step is pinfeed's (the lr of each epoch's last step in metrics.jsonl, with a fractional
  warm-up and a min_lr), and its steps per epoch drop the last partial batch as pinfeed does;
- `scripts/tables.py parity` passes within the threshold, fails beyond it (exit 1) and refuses runs of different
  lengths (exit 2); it says whether the mean difference +- 2 standard errors lies within the threshold, beyond
  it, or across it;
- with torchvision importable, a 2-epoch CPU run of reference_train.py writes pinfeed's metric fields with the
  same lr and steps per epoch as pinfeed (skipped otherwise).

Usage: check_parity_scripts.py PINFEED_EXE REPO_ROOT. Exits 77 (ctest: skipped) without torch or tomllib.
"""
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail, gen_data, skip_without


def pinfeed_run(exe, config, data, runs, overrides):
    subprocess.run([exe, "train", "--config", str(config), f'data.root="{data}"', f'run.dir="{runs}"'] + overrides,
                   check=True, stdout=subprocess.DEVNULL)
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return run, rows


def close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b


def main():
    exe, repo = sys.argv[1], pathlib.Path(sys.argv[2])
    os.environ["PINFEED_BIN"] = exe  # reference_config.defaults() asks this pinfeed for its keys, here and in children
    with skip_without("Python < 3.11"):
        import tomllib  # noqa: F401
    sys.path.insert(0, str(repo / "scripts"))
    import reference_train as ref

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        data = tmp / "data"
        # 2 classes x 5 train images: 10 // 3 = 3 steps with drop_last, 4 without.
        gen_data(exe, data, 2, 5, 1, "20x16")
        overrides = ["train.device=cpu", "train.precision=fp32", "pipeline.mode=pageable", "data.image_size=16",
                     "train.batch_size=3", "train.epochs=2", "train.warmup_epochs=1.5", "train.lr=0.02",
                     "train.min_lr=0.001", "data.workers=1", "train.channels_last=false", "run.name=parity-check",
                     "pipeline.warmup_steps=0"]
        config = repo / "configs" / "parity_resnet50.toml"
        run, rows = pinfeed_run(exe, config, data, tmp / "runs", overrides)

        # 1. Every key resolves to pinfeed's value (run.dir and data.root were given to pinfeed alone).
        cfg = ref.load_config(str(config), overrides + [f'data.root="{data}"', f'run.dir="{tmp / "runs"}"'])
        with open(run / "config.toml", "rb") as f:
            resolved = tomllib.load(f)
        for section, keys in resolved.items():
            for key, value in keys.items():
                if key not in cfg.get(section, {}):
                    fail(f"pinfeed key {section}.{key} unknown to reference_train.py")
                if not close(cfg[section][key], value):
                    fail(f"{section}.{key}: reference_train.py reads {cfg[section][key]!r}, pinfeed {value!r}")
        for bad in (["train.lrr=0.1"], ["train.epochs=1.5"], ["train.lr=fast"]):
            try:
                ref.load_config(str(config), bad + [f'data.root="{data}"'])
                fail(f"override {bad[0]} was accepted")
            except ref.UsageError:
                pass
        r = subprocess.run([sys.executable, str(repo / "scripts" / "reference_train.py"), "--config", str(config),
                            f'data.root="{data}"', "--out", str(tmp / "never.jsonl")], capture_output=True, text=True,
                           env=dict(os.environ, PINFEED_BIN=str(tmp / "no-pinfeed")))
        if r.returncode != 2 or "PINFEED_BIN" not in r.stderr or "Traceback" in r.stderr:
            fail(f"reference_train.py without a pinfeed to ask for the defaults: exit {r.returncode}\n{r.stderr}")

        # 2. The learning rate of each epoch's last step, and drop_last.
        steps = 10 // 3
        for row in rows:
            if row["steps"] + row["warmup_steps"] != steps:
                fail(f"pinfeed ran {row['steps']} + {row['warmup_steps']} steps in an epoch, expected {steps}")
            lr = ref.learning_rate(cfg["train"], row["epoch"] * steps - 1, steps, 1.0)
            if not math.isclose(lr, row["lr"], rel_tol=1e-9):
                fail(f"epoch {row['epoch']}: pinfeed lr {row['lr']}, reference_train.learning_rate {lr}")

        # 3. The verdict of tables.py parity.
        def runs(top1s):
            paths = []
            for i, top1 in enumerate(top1s):
                p = tmp / f"run{len(list(tmp.glob('run*.jsonl')))}.jsonl"
                p.write_text("".join(json.dumps({"epoch": e + 1, "train_loss": 1.0, "val_top1": v, "val_top5": 1.0,
                                                 "samples_per_s": 100.0, "epoch_s": 1.0}) + "\n"
                                     for e, v in enumerate(top1)))
                paths.append(str(p))
            return paths

        def verdict(pin, ref_runs):
            out = tmp / "results"
            r = subprocess.run([sys.executable, str(repo / "scripts" / "tables.py"), "parity", "--pinfeed", *pin,
                                "--reference", *ref_runs, "--out-dir", str(out), "--no-chart"],
                               capture_output=True, text=True)
            return r.returncode, (out / "parity.md").read_text() if (out / "parity.md").exists() else ""

        code, md = verdict(runs([[0.5, 0.800], [0.5, 0.810]]), runs([[0.4, 0.800], [0.4, 0.815]]))
        if code != 0 or "PASS" not in md or "-0.25" not in md:
            fail(f"0.25 points apart: exit {code}, table:\n{md}")
        if "cannot settle it" not in md:  # 0.25 apart, standard error 0.90: the interval crosses 1 point
            fail(f"0.25 points apart with seeds 1 point apart: expected an unsettled reading, table:\n{md}")
        code, md = verdict(runs([[0.5, 0.80], [0.5, 0.80]]), runs([[0.5, 0.78], [0.5, 0.79]]))
        if code != 1 or "FAIL" not in md:
            fail(f"1.5 points apart: exit {code}, expected 1")
        code, md = verdict(runs([[0.5, 0.800], [0.5, 0.801]]), runs([[0.5, 0.801], [0.5, 0.802]]))
        if code != 0 or "whole interval is within" not in md:
            fail(f"0.1 points apart, seeds 0.1 points apart: exit {code}, table:\n{md}")
        code, md = verdict(runs([[0.5, 0.800], [0.5, 0.801]]), runs([[0.5, 0.830], [0.5, 0.831]]))
        if code != 1 or "a real gap" not in md:
            fail(f"3 points apart, seeds 0.1 points apart: exit {code}, table:\n{md}")
        code, _ = verdict(runs([[0.5, 0.80], [0.5, 0.80]]), runs([[0.5], [0.5]]))
        if code != 2:
            fail(f"runs of 2 and 1 epochs: exit {code}, expected 2")
        # Its parity.json gives the same table again (--from: how docs/ keeps the raw runs).
        code, md = verdict(runs([[0.5, 0.800], [0.5, 0.810]]), runs([[0.4, 0.800], [0.4, 0.815]]))
        r = subprocess.run([sys.executable, str(repo / "scripts" / "tables.py"), "parity", "--from",
                            str(tmp / "results" / "parity.json"), "--out-dir", str(tmp / "again"), "--no-chart"],
                           capture_output=True, text=True)
        if r.returncode != code or (tmp / "again" / "parity.md").read_text() != md:
            fail(f"--from its parity.json: exit {r.returncode}, a different table:\n{r.stdout}{r.stderr}")

        # 4. The reference trainer itself, where torchvision is there.
        try:
            import torchvision  # noqa: F401
        except ImportError:
            print("torchvision is not importable: the reference_train.py run is skipped")
            print("OK")
            return 0
        out = tmp / "reference.jsonl"
        subprocess.run([sys.executable, str(repo / "scripts" / "reference_train.py"), "--config", str(config),
                        f'data.root="{data}"', "--out", str(out), "--workers", "0"] + overrides, check=True,
                       stdout=subprocess.DEVNULL)
        got = [json.loads(line) for line in out.read_text().splitlines()]
        if [r["epoch"] for r in got] != [1, 2]:
            fail(f"reference epochs {[r['epoch'] for r in got]}")
        for a, b in zip(got, rows):
            if a["steps"] != steps or not math.isclose(a["lr"], b["lr"], rel_tol=1e-9):
                fail(f"epoch {a['epoch']}: reference steps {a['steps']} lr {a['lr']}, pinfeed lr {b['lr']}")
            for k in ("train_loss", "val_loss", "val_top1", "val_top5"):
                if not isinstance(a[k], float) or not math.isfinite(a[k]):
                    fail(f"epoch {a['epoch']}: {k} = {a[k]!r}")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The time-to-accuracy scripts:

- `scripts/tables.py tta` on hand-made runs: the target (the Python side's mean final top-1), each run's first epoch
  at or above it (nothing interpolated; "not reached"), the Python time of a run that ends below the target (its
  end), the speed-ups and their mean and standard error, the top-1 gap's verdicts, the clock each file offers
  (launch_s, else wall_s, else the running sum of epoch_s), exit 2 on unequal numbers of runs;
- scripts/timed_run.py stamps every line of a file that appears after the launch with an increasing launch_s and
  passes the command's exit code on;
- scripts/reference_train.py trains at pinfeed's side each epoch (reference_config.side_of_epoch): against the
  image_size of pinfeed's metrics.jsonl for a ramp whose middle sides round half to even and for a list whose last
  side holds, and against FFCV's 16- and 88-epoch ramps as tests/test_side_schedule.cpp pins them; the schedule
  keys resolve to what pinfeed writes into its run folder's config.toml;
- `scripts/tables.py project`: one run's time put to ImageNet-1k's size (each epoch at its rate, its evaluation
  scaled, the run's overhead kept), and `tables.py archs`: each arch's ratio from the step tables;
- reference_train.py --loader dali without DALI importable: exit 3 and one line naming the package (skipped
  where DALI is there).

Usage: check_time_to_accuracy.py PINFEED_EXE REPO_ROOT. Exits 77 (ctest: skipped) without tomllib.
"""
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail, gen_data, skip_without


def write_run(path, rows, clock="launch_s"):
    with open(path, "w") as f:
        for i, (top1, t) in enumerate(rows):
            row = {"epoch": i + 1, "val_top1": top1, "epoch_s": 5.0, "samples_per_s": 100.0 * (i + 1)}
            if clock:
                row[clock] = t
            f.write(json.dumps(row) + "\n")
    return str(path)


def table(repo, tmp, pinfeed, python, *extra):
    out = tmp / "tta.json"
    r = subprocess.run([sys.executable, str(repo / "scripts" / "tables.py"), "tta", "--pinfeed", *pinfeed,
                        "--python", *python, "--json", str(out), *extra], capture_output=True, text=True)
    return r.returncode, (json.loads(out.read_text()) if r.returncode == 0 else None), r.stdout + r.stderr


def check_table(repo, tmp):
    # Python finals 0.84 and 0.78: target 0.81. pinfeed seed 0 first reaches it at epoch 3 (30 s), seed 1 at epoch
    # 2 (22 s; its later dip does not matter). Python seed 0 reaches it at epoch 3 (120 s); seed 1 ends below it:
    # its whole run, 100 s, counts.
    p = [write_run(tmp / "p0.jsonl", [(0.50, 10), (0.80, 20), (0.83, 30)]),
         write_run(tmp / "p1.jsonl", [(0.60, 12), (0.815, 22), (0.80, 32)])]
    r = [write_run(tmp / "r0.jsonl", [(0.50, 40), (0.70, 80), (0.84, 120)], clock="wall_s"),
         write_run(tmp / "r1.jsonl", [(0.50, 40), (0.70, 70), (0.78, 100)], clock="wall_s")]
    code, res, text = table(repo, tmp, p, r, "--seeds", "0", "1")
    if code != 0:
        fail(f"tables.py tta exit {code}: {text}")
    if not math.isclose(res["target_top1"], 0.81):
        fail(f"target {res['target_top1']}, expected 0.81")
    seeds = res["seeds"]
    want = [(30, 3, 120, 3, 120, 4.0), (22, 2, None, None, 100, 100 / 22)]
    for s, (pf, pf_e, py, py_e, ref, speedup) in zip(seeds, want):
        got = (s["pinfeed_s"], s["pinfeed_epoch"], s["python_s"], s["python_epoch"], s["python_ref_s"])
        if got != (pf, pf_e, py, py_e, ref) or not math.isclose(s["speedup"], speedup):
            fail(f"seed {s['seed']}: {got} speed-up {s['speedup']}, expected {(pf, pf_e, py, py_e, ref)} {speedup}")
    sm = res["summary"]
    mean_speedup = (4.0 + 100 / 22) / 2
    se_speedup = abs(4.0 - 100 / 22) / 2  # two values: stdev / sqrt(2) = |a - b| / 2
    if not (math.isclose(sm["speedup"]["mean"], mean_speedup) and math.isclose(sm["speedup"]["se"], se_speedup)):
        fail(f"speed-up {sm['speedup']}, expected {mean_speedup} +- {se_speedup}")
    if not math.isclose(res["ratio_of_mean_times"], 110 / 26):
        fail(f"ratio of mean times {res['ratio_of_mean_times']}, expected {110 / 26}")
    # Mean curves: pinfeed 0.55, 0.8075, 0.815 at 11, 21, 31 s: the target at epoch 3 (31 s); Python's at 120 and
    # 100 s: 110 s.
    mc = res["mean_curves"]
    if (mc["pinfeed"]["target_s"], mc["pinfeed"]["target_epoch"], mc["python"]["target_s"]) != (31, 3, 110) \
            or not math.isclose(res["ratio_of_mean_curves"], 110 / 31):
        fail(f"mean curves {mc}, ratio {res['ratio_of_mean_curves']}, expected 31 s (epoch 3), 110 s, {110 / 31}")
    # finals: pinfeed 0.83, 0.80 (mean 0.815), Python 0.84, 0.78 (0.81): +0.5 points, s.e. sqrt(1.5^2 + 3^2) = 3.35
    if not (math.isclose(res["top1_gap_points"], 0.5) and math.isclose(res["top1_gap_se_points"], math.hypot(1.5, 3))
            and res["gap_within_1_point"] and res["gap_within_se"]):
        fail(f"gap {res['top1_gap_points']} s.e. {res['top1_gap_se_points']} verdicts {res['gap_within_1_point']} "
             f"{res['gap_within_se']}")
    if "not reached" in text or "100.0 (end, below)" not in text or "**4.27x ± 0.27**" not in text:
        fail(f"markdown:\n{text}")
    curves = res["curves"]
    if [c["seed"] for c in curves] != ["0", "1"] or curves[0]["pinfeed"] != {"wall": [10, 20, 30],
                                                                            "top1": [0.50, 0.80, 0.83]} \
            or curves[1]["python"]["wall"] != [40, 70, 100]:
        fail(f"curves: {curves}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not importable: --png is not checked")
    else:
        png = tmp / "tta.png"
        code, _, text = table(repo, tmp, p, r, "--seeds", "0", "1", "--png", str(png))
        if code != 0 or not png.exists() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            fail(f"--png: exit {code}, {png} {'written' if png.exists() else 'missing'}: {text}")

    # pinfeed never reaches a higher target; the gap is beyond 1 point and beyond its standard error.
    r_hi = [write_run(tmp / "r2.jsonl", [(0.5, 40), (0.90, 80)]), write_run(tmp / "r3.jsonl", [(0.5, 40), (0.91, 80)])]
    code, res, text = table(repo, tmp, p, r_hi)
    if code != 0 or res["pinfeed_reached"] != 0 or "not reached" not in text or res["summary"]["speedup"]["mean"]:
        fail(f"a target pinfeed never reaches: exit {code}\n{text}")
    if res["gap_within_1_point"] or res["gap_within_se"]:
        fail(f"9 points apart: verdicts {res['gap_within_1_point']} {res['gap_within_se']}")
    # --tolerance 11 points brings the target within reach: 0.795, at seed 0's epoch 2 (20 s).
    code, res, _ = table(repo, tmp, p, r_hi, "--tolerance", "11")
    if code != 0 or res["seeds"][0]["pinfeed_s"] != 20:
        fail(f"--tolerance 11: {res and res['seeds'][0]}")

    # A projection to 2,000 + 200 images from runs of 1,000 + 100: epochs at 100 and 200 samples/s with 1 s of
    # evaluation each, 30 s in all: 17 s steady, 13 s overhead; projected 13 + (20 + 2) + (10 + 2) = 47 s.
    proj = tmp / "proj.jsonl"
    proj.write_text("".join(json.dumps({"epoch": e, "val_top1": 0.5, "launch_s": w, "samples_per_s": rate,
                                        "eval_s": 1.0}) + "\n" for e, w, rate in ((1, 15.0, 100), (2, 30.0, 200))))
    code, res, text = table(repo, tmp, [str(proj)], [str(proj)], "--images", "1000", "100", "--project", "2000", "200")
    if code != 0 or not math.isclose(res["seeds"][0]["pinfeed_projected_s"], 47.0) \
            or "Projected, not measured" not in text or "0.8 min" not in text:
        fail(f"projection: exit {code}, {res and res['seeds'][0]}\n{text}")
    if table(repo, tmp, [str(proj)], [str(proj)], "--project", "2000", "200")[0] != 2:
        fail("--project without --images was accepted")

    # The clock: launch_s before wall_s; without either, the running sum of epoch_s (5 s an epoch).
    both = tmp / "both.jsonl"
    both.write_text("".join(json.dumps({"epoch": e, "val_top1": v, "launch_s": 100.0 * e, "wall_s": 1.0 * e,
                                        "epoch_s": 5.0}) + "\n" for e, v in ((1, 0.5), (2, 0.9))))
    sums = write_run(tmp / "sums.jsonl", [(0.5, None), (0.9, None)], clock=None)
    code, res, _ = table(repo, tmp, [str(both), sums], [str(both), sums])
    if code != 0 or [s["pinfeed_s"] for s in res["seeds"]] != [200.0, 10.0]:
        fail(f"clocks: {res and [s['pinfeed_s'] for s in res['seeds']]}, expected [200.0, 10.0] (launch_s, sum)")
    code, _, text = table(repo, tmp, p, r[:1])
    if code != 2:
        fail(f"2 pinfeed runs against 1 Python run: exit {code}, expected 2")
    empty = tmp / "empty.jsonl"
    empty.write_text("")
    if table(repo, tmp, [str(empty)], [str(empty)])[0] != 2:
        fail("a file without epochs was accepted")


def check_project_and_archs(repo, tmp):
    # 2 epochs of 1,000 training images at 100 and 200 samples/s, 1 s of evaluation each over 100 val images,
    # 30 s in all: 10 + 5 + 1 + 1 = 17 s of steady time, so 13 s of overhead. At 10,000 + 1,000 images:
    # 100 + 50 + 10 + 10 + 13 = 183 s.
    run = tmp / "project.jsonl"
    with open(run, "w") as f:
        for i, (rate, wall) in enumerate([(100.0, 20.0), (200.0, 30.0)]):
            f.write(json.dumps({"epoch": i + 1, "val_top1": 0.5, "samples_per_s": rate, "eval_s": 1.0,
                                "launch_s": wall}) + "\n")
    out = tmp / "project.json"
    r = subprocess.run([sys.executable, str(repo / "scripts" / "tables.py"), "project", "--images", "1000", "100",
                        "--project", "10000", "1000", "--reported", "35.0", "--json", str(out), str(run)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"tables.py project exit {r.returncode}: {r.stdout + r.stderr}")
    got = json.loads(out.read_text())["projected_s"]
    if not math.isclose(got, 183.0):
        fail(f"projected {got} s, expected 183")
    if "| 3.0 | 35.0 |" not in r.stdout:
        fail(f"the table lacks the projected and reported minutes: {r.stdout}")
    tables = []
    for arch, (peer, ours) in {"resnet18": (100.0, 120.0), "resnet50": (50.0, 52.0)}.items():
        d = tmp / "archs" / arch
        d.mkdir(parents=True)
        rows = [{"label": "torchvision + torch.compile reduce-overhead, fp16", "median": peer, "min": peer,
                 "max": peer, "precision": "fp16", "batch_size": 256, "image_size": 224},
                {"label": "pinfeed, fused BatchNorm, fp16", "median": ours, "min": ours, "max": ours,
                 "precision": "fp16", "batch_size": 256, "image_size": 224}]
        (d / "table.json").write_text(json.dumps({"rows": rows}))
        tables.append(str(d / "table.json"))
    r = subprocess.run([sys.executable, str(repo / "scripts" / "tables.py"), "archs", *tables], capture_output=True,
                       text=True)
    if r.returncode != 0 or "| resnet18 |" not in r.stdout or "1.20x" not in r.stdout or "1.04x" not in r.stdout:
        fail(f"tables.py archs: exit {r.returncode}: {r.stdout + r.stderr}")


def check_timed_run(repo, tmp):
    metrics, out = tmp / "m.jsonl", tmp / "timed.jsonl"
    writer = ("import json, sys, time\n"
              f"f = open({str(metrics)!r}, 'w')\n"
              "for e in (1, 2):\n"
              "    time.sleep(0.2)\n"
              "    f.write(json.dumps({'epoch': e}) + '\\n'); f.flush()\n"
              "sys.exit(3)\n")
    r = subprocess.run([sys.executable, str(repo / "scripts" / "timed_run.py"), "--metrics", str(tmp / "m.json*"),
                        "--out", str(out), "--", sys.executable, "-c", writer], capture_output=True, text=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    if r.returncode != 3:
        fail(f"timed_run.py exit {r.returncode}, expected the command's 3: {r.stderr}")
    if [row["epoch"] for row in rows] != [1, 2] or not 0 < rows[0]["launch_s"] <= rows[1]["launch_s"]:
        fail(f"timed_run.py rows {rows}")


def pinfeed_sides(exe, repo, tmp, data, name, overrides):
    runs = tmp / name
    config = repo / "configs" / "parity_resnet50.toml"
    r = subprocess.run([exe, "train", "--config", str(config), f'data.root="{data}"', f'run.dir="{runs}"'] + overrides,
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"pinfeed train {' '.join(overrides)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    import tomllib
    with open(run / "config.toml", "rb") as f:
        resolved = tomllib.load(f)
    return config, [r["image_size"] for r in rows], resolved


def check_sides(exe, repo, tmp):
    sys.path.insert(0, str(repo / "scripts"))
    import reference_config as ref

    def sides(epochs, **data):
        d = dict(ref.defaults()["data"], **data)
        return [ref.side_of_epoch(d, e) for e in range(epochs)]

    # tests/test_side_schedule.cpp's cases (FFCV's get_resolution).
    if sides(16, image_size_min=160, image_size_max=192, ramp_start=11, ramp_end=13) != [160] * 12 + [192] * 4:
        fail("FFCV's 16-epoch ramp")
    ffcv88 = dict(image_size_min=160, image_size_max=192, ramp_start=65, ramp_end=76)
    if sides(88, **ffcv88)[70] != 160 or sides(88, **ffcv88)[72] != 192:
        fail("FFCV's 88-epoch ramp at epochs 70 and 72")
    if sides(6, image_size_min=128, image_size_max=256, ramp_start=0, ramp_end=4) != [128, 160, 192, 224, 256, 256]:
        fail("the ramp 128 -> 256 over 4 epochs")
    if sides(3, image_size=176) != [176] * 3 or sides(5, image_size_by_epoch="160*2, 192") != [160, 160, 192, 192, 192]:
        fail("the fixed side, or the list's last side holding")
    if ref.sides_text(ref.parse_sides("128*3,160*12 , 192*4")) != "128*3, 160*12, 192*4":
        fail("sides_text(parse_sides(...))")
    for bad in ("160x2", "abc", "160*0", "8", "160*", "160*2*3", "160, ,192", "160*600, 192*999401"):
        try:
            ref.parse_sides(bad)
            fail(f"parse_sides accepted {bad!r}")
        except ValueError:
            pass

    # pinfeed itself: a ramp whose middle epochs round 1.5 and 2.5 (x 16) to even, and a list going back down.
    data = tmp / "data"
    gen_data(exe, data, 2, 2, 1, "20x16")
    common = ["train.device=cpu", "train.precision=fp32", "pipeline.mode=pageable", "train.batch_size=2",
              "train.max_steps_per_epoch=1", "train.eval=false", "data.workers=1", "train.channels_last=false",
              "run.checkpoint_every=1000", "pipeline.warmup_steps=0", "train.warmup_epochs=0"]
    cases = {"ramp": ["train.epochs=5", "data.image_size_min=16", "data.image_size_max=48", "data.ramp_start=0",
                      "data.ramp_end=4", "data.ramp_step=16"],
             "list": ["train.epochs=4", 'data.image_size_by_epoch="16*2,32 , 16"']}
    for name, overrides in cases.items():
        config, got, resolved = pinfeed_sides(exe, repo, tmp, data, name, common + overrides)
        cfg = ref.load_config(str(config), common + overrides + [f'data.root="{data}"'])
        want = ref.sides_by_epoch(cfg)
        if got != want:
            fail(f"{name}: pinfeed trained at {got}, reference_config.side_of_epoch gives {want}")
        for key in ("image_size_min", "image_size_max", "ramp_start", "ramp_end", "ramp_step", "image_size_by_epoch"):
            if resolved["data"][key] != cfg["data"][key]:
                fail(f"{name}: data.{key}: pinfeed {resolved['data'][key]!r}, reference {cfg['data'][key]!r}")
    if got != [16, 16, 32, 16]:
        fail(f"the list case trained at {got}")


def check_missing_dali(repo, tmp):
    try:
        import nvidia.dali  # noqa: F401
        print("DALI is importable: the message without it is not checked")
        return
    except ImportError:
        pass
    r = subprocess.run([sys.executable, str(repo / "scripts" / "reference_train.py"), "--config",
                        str(repo / "configs" / "resnet50_ffcv16.toml"), f'data.root="{tmp / "data"}"',
                        "train.device=cpu", "train.precision=fp32", "--loader", "dali", "--out", str(tmp / "d.jsonl")],
                       capture_output=True, text=True)
    if r.returncode != 3 or "nvidia-dali-cuda130" not in r.stderr:
        fail(f"--loader dali without DALI: exit {r.returncode}, stderr {r.stderr!r}")


def main():
    exe, repo = sys.argv[1], pathlib.Path(sys.argv[2])
    os.environ["PINFEED_BIN"] = exe  # reference_config.defaults() asks this pinfeed for its keys, here and in children
    with skip_without("Python < 3.11"):
        import tomllib  # noqa: F401
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        check_table(repo, tmp)
        check_timed_run(repo, tmp)
        check_project_and_archs(repo, tmp)
        check_sides(exe, repo, tmp)
        check_missing_dali(repo, tmp)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

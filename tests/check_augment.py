"""pinfeed's augmentations (pipeline/augment/) against their peers' definitions, on the CPU: each op of
TrivialAugmentWide, RandAugment and AutoAugment against torchvision's _apply_op at the same magnitude (the
magnitude itself from torchvision's own tables), a batch's per-image draws replayed through torchvision, random
erasing against F.erase with the same box, Mixup/CutMix against timm's Mixup with the same Beta draw and box
centre: soft targets and boxes exactly.

Usage: check_augment.py AUGMENT_DUMP_EXE. Exits 77 (ctest: skipped) without torch, torchvision or timm.
"""
import json
import pathlib
import subprocess
import sys
import tempfile
from unittest import mock

from check_common import skip_without

# Pixels may differ by a level or two where a value sits on a rounding edge (a mean, a convolution, a blend):
# float sums in another order. Geometric ops sample the nearest pixel: a grid point on a pixel edge may round
# the other way, so a few pixels may differ by more.
LEVELS = 2
AFFINE_OFF_FRACTION = 2e-3


def load(directory, name, dtype, shape):
    import numpy as np
    return np.fromfile(directory / name, dtype=dtype).reshape(shape)


def compare(ours, theirs, what, affine):
    import numpy as np
    diff = np.abs(ours.astype(np.int32) - theirs.astype(np.int32))
    off = float((diff > LEVELS).mean())
    if affine:
        assert off <= AFFINE_OFF_FRACTION, f"{what}: {off:.4%} of pixels differ by more than {LEVELS} levels"
    else:
        assert diff.max() <= LEVELS, f"{what}: a pixel differs by {diff.max()} levels ({off:.4%} by more than {LEVELS})"
    return int(diff.max()), float((diff > 0).mean())


def spaces(side):
    from torchvision.transforms import autoaugment as aa
    return {
        "trivial": aa.TrivialAugmentWide()._augmentation_space(31),
        "rand-m9-n2": aa.RandAugment()._augmentation_space(31, (side, side)),
        "imagenet": aa.AutoAugment()._augmentation_space(10, (side, side)),
    }


def magnitude_of(space, op, bin_, negative):
    magnitudes, signed = space[op]
    m = float(magnitudes[bin_].item()) if magnitudes.ndim > 0 else 0.0
    return -m if signed and negative else m


def interpolation(case):
    from torchvision.transforms import InterpolationMode
    mode = InterpolationMode.NEAREST if case["interpolation"] == "nearest" else InterpolationMode.BILINEAR
    return mode, case["fill"]


AFFINE = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


def check_ops(directory, manifest):
    import torch
    from torchvision.transforms.autoaugment import _apply_op
    worst = {}
    for case in manifest["ops"]:
        side = case["side"]
        images = torch.from_numpy(load(directory, manifest["images"][str(side)], "uint8", (4, 3, side, side)).copy())
        ours = load(directory, case["out"], "uint8", (4, 3, side, side))
        space = spaces(side)[case["space"] if case["space"] != "rand-m9-n2" else "rand-m9-n2"]
        bin_ = case["bin"]
        m = magnitude_of(space, case["op"], bin_, case["negative"]) if bin_ >= 0 else 0.0
        what = f'{case["space"]} {case["op"]} bin {bin_}{" -" if case["negative"] else ""} side {side} {case["interpolation"]} fill {case["fill"]}'
        assert m == case["magnitude"], f"{what}: magnitude {case['magnitude']} != torchvision's {m}"
        mode, fill = interpolation(case)
        theirs = torch.stack([_apply_op(img, case["op"], m, interpolation=mode, fill=fill) for img in images]).numpy()
        d, share = compare(ours, theirs, what, case["op"] in AFFINE)
        w = worst.setdefault(case["op"], [0, 0.0])
        w[0], w[1] = max(w[0], d), max(w[1], share)
    print(f"{len(manifest['ops'])} op cases match torchvision's _apply_op; per op, largest difference (levels) "
          "and largest share of pixels not equal:")
    for op, (d, share) in sorted(worst.items()):
        print(f"  {op:13s} {d:3d}  {share:.4%}")


def check_batches(directory, manifest):
    import torch
    from torchvision.transforms.autoaugment import _apply_op
    applied = 0
    for case in manifest["batches"]:
        side = case["side"]
        shape = (16, 3, side, side)
        images = torch.from_numpy(load(directory, case["input"], "uint8", shape).copy())
        ours = load(directory, case["output"], "uint8", shape)
        space = spaces(side)["rand-m9-n2" if case["policy"].startswith("rand") else case["policy"]]
        mode, fill = interpolation(case)
        for i, draws in enumerate(case["draws"]):
            img = images[i]
            if case["policy"] == "trivial":
                assert len(draws) == 1, draws
            if case["policy"].startswith("rand"):
                n = int(case["policy"].split("-n")[1])
                assert len(draws) == n and all(d["bin"] in (-1, int(case["policy"][6:].split("-")[0])) for d in draws), draws
            for d in draws:
                m = magnitude_of(space, d["op"], d["bin"], d["negative"]) if d["bin"] >= 0 else 0.0
                assert m == d["magnitude"], (case["policy"], d, m)
                img = _apply_op(img, d["op"], m, interpolation=mode, fill=fill)
                applied += 1
            affine = any(d["op"] in AFFINE for d in draws)
            compare(ours[i], img.numpy(), f'{case["policy"]} side {side} image {i} {draws}', affine)
    print(f"{len(manifest['batches'])} batches: {applied} per-image draws replayed through torchvision match")


def check_erasing(directory, manifest):
    import math
    import numpy as np
    import torch
    import torchvision.transforms.functional as F
    for case in manifest["erasing"]:
        side = case["side"]
        shape = (32, 3, side, side)
        x = torch.from_numpy(load(directory, case["input"], "float32", shape).copy())
        ours = load(directory, case["output"], "float32", shape)
        erased = 0
        for i, (top, left, h, w) in enumerate(case["boxes"]):
            if h == 0:
                assert np.array_equal(ours[i], x[i].numpy()), f"image {i} not erased but changed"
                continue
            erased += 1
            # The box obeys get_params: it fits, its area and aspect within the ranges (before rounding).
            assert h < side and w < side and 0 <= top <= side - h and 0 <= left <= side - w, (h, w, top, left)
            lo, hi = case["scale"][0] * side * side, case["scale"][1] * side * side
            assert (math.sqrt(lo) - 1) ** 2 <= h * w <= (math.sqrt(hi) + 1) ** 2 * max(case["ratio"]), (h, w)
            if case["value"] == "zero":
                theirs = F.erase(x[i], top, left, h, w, torch.tensor([0.0])[:, None, None])
                assert np.array_equal(ours[i], theirs.numpy()), f"image {i}: erased pixels differ from F.erase"
            else:
                inside = np.zeros((side, side), bool)
                inside[top:top + h, left:left + w] = True
                assert np.array_equal(ours[i][:, ~inside], x[i].numpy()[:, ~inside]), f"image {i}: outside the box"
                values = ours[i][:, inside]
                assert not np.array_equal(values, x[i].numpy()[:, inside]), f"image {i}: box not filled"
        assert 0 < erased < 32, f"{erased} of 32 erased with p = {case['p']}"
        print(f"random erasing, value {case['value']}: {erased} of 32 images erased as F.erase erases them")


def check_mix(directory, manifest):
    import numpy as np
    import torch
    from timm.data import mixup as timm_mixup
    cutmixed = mixed = 0
    for case in manifest["mix"]:
        b, side, classes = case["batch"], case["side"], case["classes"]
        x = torch.from_numpy(load(directory, case["input"], "float32", (b, 3, side, side)).copy())
        labels = torch.from_numpy(load(directory, case["labels"], "int64", (b,)).copy())
        ours = load(directory, case["output"], "float32", (b, 3, side, side))
        targets = load(directory, case["targets"], "float32", (b, classes))
        d = case["draw"]
        mix = timm_mixup.Mixup(mixup_alpha=case["mixup_alpha"], cutmix_alpha=case["cutmix_alpha"], prob=case["prob"],
                               switch_prob=case["switch_prob"], mode="batch", label_smoothing=case["smoothing"],
                               num_classes=classes)
        # Our draws in timm's place: the Beta draw and CutMix's choice, then rand_bbox's centre.
        centre = iter([d["cy"], d["cx"]])
        with mock.patch.object(mix, "_params_per_batch", return_value=(d["beta"], d["cutmix"])), \
                mock.patch.object(timm_mixup.np.random, "randint", side_effect=lambda *a, **k: next(centre)):
            theirs, their_targets = mix(x.clone(), labels.clone())
        what = f"mix {case['mixup_alpha']}/{case['cutmix_alpha']} draw {d}"
        assert np.array_equal(ours, theirs.numpy()), f"{what}: images differ from timm's"
        assert np.array_equal(targets, their_targets.numpy()), f"{what}: soft targets differ from timm's"
        if d["cutmix"] and d["beta"] != 1.0:
            centre = iter([d["cy"], d["cx"]])
            with mock.patch.object(timm_mixup.np.random, "randint", side_effect=lambda *a, **k: next(centre)):
                (yl, yh, xl, xh), lam = timm_mixup.cutmix_bbox_and_lam((b, 3, side, side), d["beta"])
            assert [int(yl), int(yh), int(xl), int(xh)] == d["box"] and lam == d["lam"], (what, yl, yh, xl, xh, lam)
            cutmixed += 1
        elif d["beta"] != 1.0:
            assert d["lam"] == d["beta"], what
            mixed += 1
    assert cutmixed and mixed, (cutmixed, mixed)
    print(f"Mixup/CutMix: {len(manifest['mix'])} batches ({mixed} mixed, {cutmixed} cut) equal timm's Mixup, "
          "images and soft targets, boxes and lambdas exactly")


def main():
    exe = sys.argv[1]
    with skip_without("scripts/setup.sh installs torchvision and timm"):
        import numpy  # noqa: F401
        import torch
        import torchvision
        import timm
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, timm {timm.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp)
        subprocess.run([exe, str(directory)], check=True)
        manifest = json.loads((directory / "manifest.json").read_text())
        check_ops(directory, manifest)
        check_batches(directory, manifest)
        check_erasing(directory, manifest)
        check_mix(directory, manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())

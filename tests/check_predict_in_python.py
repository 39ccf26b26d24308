"""The documented Python route from a checkpoint (val_transform and torchvision's resnet50, in README.md or
docs/run-folder.md, the lines as written) predicts as `pinfeed predict` does: the same top-1 class and probabilities within TOLERANCE, on JPEGs whose crop is decoded at
full and at reduced DCT scale, 4:2:0 and 4:4:4, progressive, grey, portrait, odd sizes and a PNG. The pixels are
not bit for bit: OpenCV's fixed-point bilinear and libjpeg's region decode round a few pixel values differently.

Usage: check_readme_predict.py PINFEED_EXE REPO. Exits 77 (ctest: skipped) without torch, torchvision or PIL.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

from check_common import gen_data, skip_without

TOLERANCE = 0.01  # on a probability
SIZE, RATIO = 32, 0.875


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert r.returncode == 0, f"{args[1]}: exit {r.returncode}:\n{r.stdout}{r.stderr}"
    return r.stdout


def documented_snippet(repo):
    for page in ("README.md", "docs/run-folder.md"):
        blocks = re.findall(r"```python\n(.*?)```", (repo / page).read_text(), re.S)
        found = [b for b in blocks if "def val_transform" in b]
        if found:
            return found[0]
    raise AssertionError("no ```python block with def val_transform in README.md or docs/run-folder.md")


def images(tmp, exe, Image):
    gen_data(exe, tmp / "large", 1, 0, 6, "200x150", "--photo", "--seed", "3")  # crop 131 px: decoded at 1/4 scale
    found = sorted((tmp / "large" / "val").glob("*/*.jpg"))
    base = Image.open(found[0]).convert("RGB").resize((517, 333))
    extra = {"wide_444.jpg": dict(quality=90, subsampling=0), "progressive.jpg": dict(quality=80, progressive=True)}
    for name, options in extra.items():
        base.save(tmp / name, **options)
        found.append(tmp / name)
    base.transpose(Image.Transpose.ROTATE_90).save(tmp / "portrait.jpg", quality=85)
    base.convert("L").save(tmp / "grey.jpg", quality=90)
    base.resize((47, 61)).save(tmp / "odd.jpg", quality=90)
    base.resize((300, 260)).save(tmp / "photo.png")
    return found + [tmp / n for n in ("portrait.jpg", "grey.jpg", "odd.jpg", "photo.png")]


def main():
    exe, repo = sys.argv[1], pathlib.Path(sys.argv[2])
    with skip_without():
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        from PIL import Image
    snippet = documented_snippet(repo)
    assert '"runs/<run>/best.pt"' in snippet and '"photo.jpg", 224, 0.875' in snippet, snippet
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        gen_data(exe, tmp / "data", 3, 8, 1, "40x40")
        config = tmp / "tiny.toml"
        config.write_text(f'[data]\nroot = "{tmp / "data"}"\nimage_size = {SIZE}\nval_resize_ratio = {RATIO}\n'
                          'workers = 1\n[train]\ndevice = "cpu"\nepochs = 2\nbatch_size = 8\nlr = 0.05\n'
                          f'precision = "fp32"\n[pipeline]\nwarmup_steps = 0\n[run]\ndir = "{tmp / "runs"}"\n')
        run(exe, "train", "-c", config)
        [best] = (tmp / "runs").glob("*/best.pt")
        files = images(tmp, exe, Image)
        predicted = [json.loads(line) for line in run(exe, "predict", "--checkpoint", best, "--json", "--top-k", "3",
                                                      *files).splitlines()]
        worst = 0.0
        scope = {}
        for i, (file, p) in enumerate(zip(files, predicted)):
            assert p["path"] == str(file), (p["path"], file)
            if i == 0:  # the documented lines as written, with this checkpoint and image
                code = snippet.replace('"runs/<run>/best.pt"', repr(str(best))).replace(
                    '"photo.jpg", 224, 0.875', f"{str(file)!r}, {SIZE}, {RATIO}")
                with torch.no_grad():
                    exec(code, scope)
                probs = scope["probs"]
            else:
                with torch.no_grad():
                    probs = scope["model"](scope["val_transform"](str(file), SIZE, RATIO)).softmax(1)
            top = p["top"]
            ours = [probs[0, t["index"]].item() for t in top]
            diff = max(abs(a - t["probability"]) for a, t in zip(ours, top))
            worst = max(worst, diff)
            assert diff < TOLERANCE, f"{file.name}: probabilities {ours} against predict's {top}"
            if top[0]["probability"] - top[1]["probability"] > 2 * TOLERANCE:  # a clear top-1
                assert probs.argmax().item() == top[0]["index"], f"{file.name}: top-1 {probs} against {top}"
        print(f"the documented val_transform + torchvision resnet50 against pinfeed predict on {len(files)} images: the same "
              f"top-1, probabilities within {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

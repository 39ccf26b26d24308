"""Every model.arch is torchvision's network, both ways: a torchvision state dict of each arch (random weights and
BN statistics) predicts in pinfeed what the torchvision model computes in eval mode (the same top classes, each
probability within 1e-4, on a PNG that the validation transform leaves as it is); and, for one arch of each block
kind (ROUND_TRIP: BasicBlock, Bottleneck, grouped, wide; the deeper ones differ only in block counts, which
test_model's EveryArch test holds to torchvision's names and shapes), `train.init_from` starts a run of that arch
from it and the checkpoint that run writes loads strictly into the same torchvision model.

Usage: check_arch_family.py PINFEED_EXE. Exits 77 (ctest: skipped) without torch and torchvision.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import fail, gen_data, skip_without, tiny_config

ARCHS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "wide_resnet101_2",
         "resnext50_32x4d", "resnext101_32x8d"]
ROUND_TRIP = {"resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2"}  # the runs of the 101/152 ones: ~1 min
SIDE = 32
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, args[:2]))}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    exe = sys.argv[1]
    with skip_without("torchvision, numpy and PIL compare the networks"):
        import numpy as np
        import torch
        import torchvision
        from PIL import Image
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        gen_data(exe, tmp / "data", 3, 2, 1, f"{SIDE}x{SIDE}")
        image = tmp / "image.png"
        pixels = (np.random.default_rng(0).random((SIDE, SIDE, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(image)
        x = (torch.from_numpy(pixels).float() / 255 - torch.tensor(MEAN)) / torch.tensor(STD)
        x = x.permute(2, 0, 1)[None]
        config = tiny_config(tmp / "tiny.toml", tmp / "data", tmp / "runs", 2, image_size=SIDE,
                             data_lines="val_resize_ratio = 1.0\n", train_lines="max_steps_per_epoch = 1\neval = false\n")
        for arch in ARCHS:
            model = getattr(torchvision.models, arch)(num_classes=3).eval()
            with torch.no_grad():
                for m in model.modules():
                    if isinstance(m, torch.nn.BatchNorm2d):
                        m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.2, 0.2)
                        m.running_mean.uniform_(-0.2, 0.2), m.running_var.uniform_(0.5, 1.5)
                want = torch.softmax(model(x)[0].double(), 0)
            sd = tmp / f"{arch}.pt"
            torch.save(model.state_dict(), sd)
            top = json.loads(run(exe, "predict", "--checkpoint", sd, "--top-k", "3", "--json", "-c", config,
                                 "--device", "cpu", image))["top"]
            for t in top:
                if abs(t["probability"] - want[t["index"]].item()) > 1e-4:
                    fail(f"{arch}: class {t['index']} pinfeed {t['probability']:.6f}, torchvision "
                         f"{want[t['index']].item():.6f}")
            if [t["index"] for t in top] != want.argsort(descending=True).tolist():
                fail(f"{arch}: pinfeed ranks {[t['index'] for t in top]}, torchvision {want.argsort(descending=True)}")
            if arch not in ROUND_TRIP:
                print(f"{arch}: predict equals torchvision's eval to 1e-4")
                continue
            run(exe, "train", "-c", config, f"model.arch={arch}", f'train.init_from="{sd}"', f"run.name={arch}")
            [last] = (tmp / "runs").glob(f"*-{arch}/last.pt")
            ck = torch.load(last, weights_only=True)
            getattr(torchvision.models, arch)(num_classes=3).load_state_dict(ck["model"], strict=True)
            print(f"{arch}: predict equals torchvision's eval to 1e-4; init_from and its checkpoint round-trip")


if __name__ == "__main__":
    main()

"""A state dict that Python wrote with torch.save(model.state_dict()) (torchvision's resnet50 names and shapes, an
OrderedDict with its _metadata) works in pinfeed: `eval` and `predict` read it (classes by index; eval refuses
one whose class count is not the folders'), `train.init_from`
starts a run from it (fc re-initialised for another class count), and `--resume` of it points to train.init_from.
The checkpoints pinfeed writes carry the class names, which torch.load(weights_only=True) reads; with torchvision
importable, README's export route (load_state_dict, then torch.jit.script) runs on best.pt.

Usage: check_state_dict.py PINFEED_EXE REFERENCE_TSV. Exits 77 (ctest: skipped) without torch.
"""
import collections
import copy
import json
import pathlib
import subprocess
import sys
import tempfile

from check_common import gen_data, skip_without, tiny_config


def state_dict(tsv, torch):
    try:
        import torchvision
        return torchvision.models.resnet50().state_dict()
    except ImportError:
        pass
    sd = collections.OrderedDict()
    for line in pathlib.Path(tsv).read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, shape, dtype = line.split("\t")
        shape = [int(n) for n in shape.split(",") if n]
        if dtype == "int64":
            sd[name] = torch.zeros(shape, dtype=torch.int64)
        elif name.endswith("running_var"):
            sd[name] = torch.ones(shape)
        else:
            sd[name] = torch.randn(shape) * 0.01
    sd._metadata = collections.OrderedDict({"": {"version": 1}})  # as Module.state_dict() sets it
    return sd


def run(*args, code=0):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == code, f"{args[1]}: exit {r.returncode}, expected {code}:\n{out}"
    assert "INTERNAL ASSERT" not in out, out
    return r.stdout, out


def main():
    exe, tsv = sys.argv[1], sys.argv[2]
    with skip_without():
        import torch
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        sd_path = tmp / "resnet50_state_dict.pt"
        sd = state_dict(tsv, torch)
        torch.save(sd, sd_path)
        gen_data(exe, tmp / "data", 2, 4, 2, "40x40")
        config = tiny_config(tmp / "tiny.toml", tmp / "data", tmp / "runs", 4, name="sd")

        # A state dict names no classes: its outputs must be as many as the class folders, or the labels (the
        # folders sorted) would not be its classes; 1000 outputs on 2 folders is refused in one line.
        _, out = run(exe, "eval", "-c", config, "--checkpoint", sd_path, "--json", code=2)
        assert "has 2 class folders but " + str(sd_path) + " classifies 1000 and names none" in out, out
        assert out.count("error:") == 1, out
        two = copy.copy(sd)  # keeps _metadata
        two["fc.weight"], two["fc.bias"] = sd["fc.weight"][:2].clone(), sd["fc.bias"][:2].clone()
        two_path = tmp / "two_classes.pt"
        torch.save(two, two_path)
        stdout, _ = run(exe, "eval", "-c", config, "--checkpoint", two_path, "--json")
        result = json.loads(stdout)
        assert result["images"] == 4 and 0 <= result["top1"] <= 1, result
        print(f"eval of a Python state dict: {result}")

        image = next((tmp / "data" / "val").glob("*/*.jpg"))
        stdout, _ = run(exe, "predict", "--checkpoint", sd_path, "--top-k", "3", "--json", "-c", config, image)
        top = json.loads(stdout)["top"]
        assert len(top) == 3 and all(t["class"] == str(t["index"]) for t in top), top

        _, out = run(exe, "train", "-c", config, "--resume", sd_path, code=2)
        assert "train.init_from" in out, out

        _, out = run(exe, "train", "-c", config, f'train.init_from="{sd_path}"')
        assert "it has 1000 classes, this run 2: fc is freshly initialised" in out, out
        [best] = (tmp / "runs").glob("*/best.pt")
        ck = torch.load(best, weights_only=True)
        assert ck["classes"] == sorted(p.name for p in (tmp / "data" / "train").iterdir()), ck["classes"]
        assert ck["epoch"] == 1 and 0 <= ck["best_val_top1"] <= 1, (ck["epoch"], ck["best_val_top1"])
        print(f"train.init_from ran; best.pt: epoch {ck['epoch']}, classes {ck['classes']}")

        try:
            import torchvision
        except ImportError:
            print("torchvision not importable: the export route is not checked")
            return 0
        model = torchvision.models.resnet50(num_classes=len(ck["classes"]))
        model.load_state_dict(torch.load(best, weights_only=True)["model"])
        scripted = torch.jit.script(model.eval())
        x = torch.randn(1, 3, 32, 32)
        assert torch.allclose(scripted(x), model(x))
        print("export: torch.jit.script of best.pt's model matches it")
    return 0


if __name__ == "__main__":
    sys.exit(main())

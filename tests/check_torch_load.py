"""A checkpoint pinfeed wrote loads with a plain torch.load() (weights_only=True, the default since PyTorch 2.6),
and its model is torchvision's resnet50 state dict one to one: a strict load_state_dict when torchvision is
importable, else the names, shapes and dtypes listed in data/torchvision_resnet50_state_dict.tsv. The run trains
with LAMB and the EMA of the weights, so that their state (model_ema: torchvision's names too) is in the file.

Usage: check_torch_load.py PINFEED_EXE REFERENCE_TSV. Exits 77 (ctest: skipped) without torch.
"""
import pathlib
import subprocess
import sys
import tempfile

from check_common import gen_data, skip_without, tiny_config


def reference(tsv):
    rows = {}
    for line in pathlib.Path(tsv).read_text().splitlines():
        if line and not line.startswith("#"):
            name, shape, dtype = line.split("\t")
            rows[name] = (tuple(int(n) for n in shape.split(",") if n), dtype)
    return rows


def main():
    exe, tsv = sys.argv[1], sys.argv[2]
    with skip_without():
        import torch
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        gen_data(exe, tmp / "data", 2, 4, 1, "32x32")
        # torchvision's default head (1000 outputs), so that every shape compares
        config = tiny_config(tmp / "tiny.toml", tmp / "data", tmp / "runs", 4, name="torchload",
                             model_lines="num_classes = 1000\nallow_extra_classes = true\n",
                             train_lines='warmup_epochs = 0\noptimizer = "lamb"\nema = true\n')
        subprocess.run([exe, "train", "-c", str(config)], check=True)
        [path] = (tmp / "runs").glob("*/last.pt")

        print(f"torch {torch.__version__}: torch.load({path.name}) with its default weights_only")
        ck = torch.load(path)  # weights_only=True is the default from PyTorch 2.6 on
        explicit = torch.load(path, weights_only=True)  # the same check where the default is still False
        assert explicit.keys() == ck.keys()

        assert isinstance(ck, dict), type(ck)
        assert ck["format_version"] == 2, ck["format_version"]
        expect = {"epoch": 1, "step_in_epoch": 0, "global_step": 2, "world_size": 1, "batch_size": 4,
                  "train_images": 8, "steps_per_epoch": 2}
        for key, value in expect.items():
            assert ck[key] == value, f"{key}: {ck[key]} != {value}"
        assert "[train]" in ck["config"]

        model, want = ck["model"], reference(tsv)
        missing, extra = sorted(set(want) - set(model)), sorted(set(model) - set(want))
        assert not missing and not extra, f"missing {missing[:5]}, unexpected {extra[:5]}"
        for name, (shape, dtype) in want.items():
            t = model[name]
            assert tuple(t.shape) == shape and str(t.dtype) == "torch." + dtype, f"{name}: {t.shape} {t.dtype}"
            assert t.device.type == "cpu", name
        assert ck["optimizer_name"] == "lamb", ck["optimizer_name"]
        params = {n for n in model if n.endswith((".weight", ".bias"))}
        assert set(ck["optimizer"]) == {f"{k}/{n}" for k in ("exp_avg", "exp_avg_sq") for n in params} | {"step"}, \
            "LAMB's moments are named by parameter"
        assert ck["optimizer"]["step"].item() == 2, ck["optimizer"]["step"]
        assert ck["ema_updates"] == 2, ck["ema_updates"]
        assert ck["model_ema"].keys() == model.keys()

        try:
            import torchvision
        except ImportError:
            print(f"{len(want)} tensors match the torchvision resnet50 list (torchvision not importable)")
            return 0
        net = torchvision.models.resnet50(num_classes=1000)
        for key in ("model", "model_ema"):
            net.load_state_dict(ck[key], strict=True)
            for name, t in net.state_dict().items():
                assert torch.equal(t, ck[key][name]), f"{key}.{name}"
        print(f"strict load_state_dict into torchvision {torchvision.__version__} resnet50: {len(model)} tensors, "
              "model and model_ema")
    return 0


if __name__ == "__main__":
    sys.exit(main())

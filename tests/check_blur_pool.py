"""pinfeed's ResNet-50 with model.blurpool gives the logits of torchvision's resnet50 with FFCV's BlurPool
(ffcv-imagenet train_imagenet.py: each Conv2d of stride > 1 and >= 16 input channels wrapped in BlurPoolConv2d, a
depthwise [1 2 1] x [1 2 1] / 16 blur with zero padding 1 before it) from the same state dict, in evaluation and
in training mode; and, with it off, plain torchvision's. The state dict is torchvision's own (saved before the
wrapping), so pinfeed loading it into the blurred model also shows that the blur adds no parameter or buffer.

The reference model, its weights (random BN statistics and affines, so that evaluation is not the identity),
an input and the four outputs go to a file that tests/blur_pool_replay.cpp (BLUR_POOL_REPLAY) runs through
pinfeed's model, in float64. Usage: check_blur_pool.py BLUR_POOL_REPLAY. Exits 77 (ctest: skipped) without torch
or torchvision.
"""
import pathlib
import subprocess
import sys
import tempfile

from check_common import skip_without


def main():
    replay = sys.argv[1]
    with skip_without():
        import torch
        import torch.nn.functional as F
        import torchvision

    class BlurPoolConv2d(torch.nn.Module):  # FFCV's, as train_imagenet.py defines it
        def __init__(self, conv):
            super().__init__()
            default_filter = torch.tensor([[[[1, 2, 1], [2, 4, 2], [1, 2, 1]]]]) / 16.0
            filt = default_filter.repeat(conv.in_channels, 1, 1, 1)
            self.conv = conv
            self.register_buffer("blur_filter", filt)

        def forward(self, x):
            blurred = F.conv2d(x, self.blur_filter, stride=1, padding=(1, 1), groups=self.conv.in_channels, bias=None)
            return self.conv.forward(blurred)

    def apply_blurpool(mod):  # FFCV's create_model_and_scaler
        for name, child in mod.named_children():
            if isinstance(child, torch.nn.Conv2d) and (max(child.stride) > 1 and child.in_channels >= 16):
                setattr(mod, name, BlurPoolConv2d(child))
            else:
                apply_blurpool(child)

    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=10).double()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    state = {k: v.clone() for k, v in model.state_dict().items()}  # torchvision's, before any wrapping
    images = torch.randn(2, 3, 64, 64, dtype=torch.double)
    outputs = {}
    for blur in (False, True):
        if blur:
            apply_blurpool(model)
            model.double()  # the blur filters FFCV's wrapper made
            wrapped = [n for n, m in model.named_modules() if isinstance(m, BlurPoolConv2d)]
            assert len(wrapped) == 6, wrapped  # layer2-4: block 0's conv2 and downsample.0
        for mode in ("eval", "train"):  # train: the batch's statistics, and it updates the running ones after
            model.train(mode == "train")
            with torch.no_grad():
                outputs[f"{'blurpool' if blur else 'plain'}_{mode}"] = model(images)
        if not blur:
            model.load_state_dict(state)  # the running statistics as saved: training mode moved them
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "case.pt"
        torch.save({"state_dict": state, "images": images, "outputs": outputs}, path)
        r = subprocess.run([replay, str(path)], capture_output=True, text=True)
    print(r.stdout + r.stderr, end="")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())

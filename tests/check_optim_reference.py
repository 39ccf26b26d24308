"""pinfeed's LARS, LAMB, SGD and weight EMA step as their Python definitions do, within float tolerance.

The references: timm.optim.Lamb (the LAMB pinfeed follows); timm.optim.Lars over two parameter groups, the conv
and fc weights with weight decay and the BN parameters and biases without, which is MLPerf's ResNet-50 LARS
(trust ratio eta ||w|| / (||g|| + wd ||w|| + eps), 1 where a norm is 0, applied to the decayed gradient inside
the momentum buffer, BN and biases neither adapted nor decayed: the update NVIDIA's MXNet SGDwFASTLARS makes,
its momentum rescaled by lr_t / lr_t-1 being the same as the learning rate outside the buffer); torch.optim.SGD;
timm.utils.model_ema.ModelEmaV3 updated as timm's train.py does, update(model, step=num_updates).

Each case runs a few steps on small named tensors with the learning rate changing every step and, for the
optimizers, one step skipped as GradScaler skips an overflowed one (Python does not call step(); pinfeed gets
infinite gradients and found_inf = 1). The inputs and timm's results go to a file that tests/optim_replay.cpp
(OPTIM_REPLAY) replays through pinfeed's classes, with the rate as a number and as a device-style tensor.

Usage: check_optim_reference.py OPTIM_REPLAY. Exits 77 (ctest: skipped) without torch or timm.
"""
import math
import pathlib
import subprocess
import sys
import tempfile

from check_common import skip_without


def shapes():
    # A ResNet in miniature: conv and fc weights (adapted by LARS), BN parameters and fc's bias (not), and a
    # weight of zeros (its trust ratio is 1).
    return {"conv1.weight": (6, 3, 3, 3), "bn1.weight": (6,), "bn1.bias": (6,), "layer1.0.conv1.weight": (4, 6, 1, 1),
            "zero.weight": (3, 4), "fc.weight": (5, 4), "fc.bias": (5,)}


def optimizer_case(torch, kind, make, options, steps=6, skip=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    initial = {n: torch.randn(s, generator=g) * 0.5 for n, s in shapes().items()}
    initial["zero.weight"].zero_()
    params = {n: t.clone().requires_grad_(True) for n, t in initial.items()}
    decay = [p for n, p in params.items() if p.dim() > 1]
    no_decay = [p for n, p in params.items() if p.dim() <= 1]
    opt = make(decay, no_decay)
    rows = []
    for k in range(steps):
        lr = 0.5 * (k + 1) / steps + 0.05
        grads = {n: torch.randn(p.shape, generator=g) * (0.1 + k) for n, p in params.items()}
        found_inf = 1 if k == skip else 0
        if found_inf:
            grads["fc.weight"][0, 0] = math.inf
        else:
            for n, p in params.items():
                p.grad = grads[n].clone()
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
        rows.append({"lr": lr, "found_inf": found_inf, "grads": grads,
                     "expected": {n: p.detach().clone() for n, p in params.items()}})
    return {"kind": kind, "options": options, "names": list(initial), "initial": initial, "steps": rows}


def ema_case(torch, ModelEmaV3, options, steps=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4, 2))
    ema = ModelEmaV3(model, decay=options["decay"], min_decay=options["min_decay"],
                     use_warmup=bool(options["warmup"]), warmup_gamma=options["warmup_gamma"],
                     warmup_power=options["warmup_power"])
    initial = {n: t.clone() for n, t in model.state_dict().items()}
    rows = []
    with torch.no_grad():
        for k in range(steps):
            for n, t in model.state_dict().items():  # as a step and its BN statistics would move them
                t.copy_(t + torch.randn(t.shape, generator=g) * 0.1 if t.is_floating_point() else t + 1)
            ema.update(model, step=k + 1)  # timm's train.py: num_updates, counted from 1
            rows.append({"model": {n: t.clone() for n, t in model.state_dict().items()},
                         "expected": {n: t.clone() for n, t in ema.module.state_dict().items()}})
    return {"kind": "ema", "options": options, "names": list(initial), "initial": initial, "steps": rows}


def main():
    replay = sys.argv[1]
    with skip_without("scripts/setup.sh installs timm into the venv"):
        import torch
        from timm.optim import Lamb, Lars
        from timm.utils.model_ema import ModelEmaV3
    wd = 0.01
    cases = {
        "sgd": optimizer_case(torch, "sgd", lambda d, n: torch.optim.SGD(
            [{"params": d, "weight_decay": wd}, {"params": n, "weight_decay": 0.0}], lr=0.1, momentum=0.9),
            {"momentum": 0.9, "nesterov": 0, "weight_decay": wd}),
        "lars": optimizer_case(torch, "lars", lambda d, n: Lars(
            [{"params": d, "weight_decay": wd}, {"params": n, "weight_decay": 0.0}], lr=0.1, momentum=0.9,
            trust_coeff=0.02, eps=1e-8), {"momentum": 0.9, "nesterov": 0, "weight_decay": wd, "eta": 0.02, "eps": 1e-8}),
        "lars_nesterov": optimizer_case(torch, "lars", lambda d, n: Lars(
            [{"params": d, "weight_decay": wd}, {"params": n, "weight_decay": 0.0}], lr=0.1, momentum=0.9,
            nesterov=True, trust_coeff=0.001, eps=0.0),
            {"momentum": 0.9, "nesterov": 1, "weight_decay": wd, "eta": 0.001, "eps": 0.0}, seed=2),
        "lamb": optimizer_case(torch, "lamb", lambda d, n: Lamb(
            [{"params": d, "weight_decay": wd}, {"params": n, "weight_decay": 0.0}], lr=0.1, foreach=False),
            {"weight_decay": wd, "beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "max_grad_norm": 1.0, "trust_clip": 0,
             "decoupled_decay": 0}),
        # Gradients far above the clipping norm; the trust ratio clipped; the decay on the weights.
        "lamb_decoupled": optimizer_case(torch, "lamb", lambda d, n: Lamb(
            [{"params": d, "weight_decay": 0.05}, {"params": n, "weight_decay": 0.0}], lr=0.1, betas=(0.8, 0.99),
            eps=1e-8, max_grad_norm=5.0, trust_clip=True, decoupled_decay=True, foreach=False),
            {"weight_decay": 0.05, "beta1": 0.8, "beta2": 0.99, "eps": 1e-8, "max_grad_norm": 5.0, "trust_clip": 1,
             "decoupled_decay": 1}, seed=3),
        "lamb_unclipped": optimizer_case(torch, "lamb", lambda d, n: Lamb(
            [{"params": d, "weight_decay": wd}, {"params": n, "weight_decay": 0.0}], lr=0.1, max_grad_norm=None),
            {"weight_decay": wd, "beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "max_grad_norm": 0.0, "trust_clip": 0,
             "decoupled_decay": 0}, seed=4),
        "ema": ema_case(torch, ModelEmaV3, {"decay": 0.9, "warmup": 0, "warmup_gamma": 1.0, "warmup_power": 2 / 3,
                                            "min_decay": 0.0}),
        "ema_warmup": ema_case(torch, ModelEmaV3, {"decay": 0.6, "warmup": 1, "warmup_gamma": 2.0,
                                                   "warmup_power": 0.75, "min_decay": 0.3}, steps=8, seed=5),
    }
    # The comparison tells LARS variants apart: adapting and decaying BN and biases too (one group) is not MLPerf's.
    unlike = {"lars_bn_adapted": optimizer_case(torch, "lars", lambda d, n: Lars(
        [{"params": d + n, "weight_decay": wd}], lr=0.1, momentum=0.9, trust_coeff=0.02, eps=1e-8),
        {"momentum": 0.9, "nesterov": 0, "weight_decay": wd, "eta": 0.02, "eps": 1e-8})}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in {**cases, **unlike}.items():
            path = pathlib.Path(tmp) / f"{name}.pt"
            torch.save(case, path)
            r = subprocess.run([replay, str(path)], capture_output=True, text=True)
            print(f"--- {name}\n{r.stdout}{r.stderr}", end="")
            if r.returncode != (1 if name in unlike else 0):
                failed.append(f"{name} (exit {r.returncode})")
    if failed:
        print("not as their Python definitions: " + ", ".join(failed))
        return 1
    print(f"all {len(cases)} cases match; {len(unlike)} other definition(s) told apart")
    return 0


if __name__ == "__main__":
    sys.exit(main())

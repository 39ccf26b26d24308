"""The recipe of a pinfeed config as scripts/reference_train.py follows it: every key with its default, the
overrides, the checks, and the rules that must give pinfeed's numbers (the learning rate per step, the training
side per epoch). Plain Python: importable without torch, and without pinfeed until a config is read (defaults()
asks the executable for its keys)."""
import functools
import json
import math
import os
import pathlib
import re
import subprocess

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

# The repository root: pinfeed's executable is looked for in its build folder.
REPO = pathlib.Path(__file__).resolve().parent.parent


def pinfeed_exe():
    """pinfeed's executable: $PINFEED_BIN, else $PINFEED_EXE, else <repo>/build/app/pinfeed."""
    return os.environ.get("PINFEED_BIN") or os.environ.get("PINFEED_EXE") or str(REPO / "build" / "app" / "pinfeed")


@functools.lru_cache(maxsize=None)
def defaults():
    """Every config key pinfeed knows, with its default, as pinfeed itself prints them (`pinfeed help config
    --json`: {"section": {"key": value}}), read once per process: the recipe's keys are read, the rest are
    pinfeed's machinery and ignored here. Shared: copy it before changing it. UsageError when no pinfeed runs."""
    exe = pinfeed_exe()
    hint = "build it (scripts/setup.sh) or point PINFEED_BIN at a pinfeed executable"
    try:
        r = subprocess.run([exe, "help", "config", "--json"], capture_output=True, text=True)
    except OSError as e:
        raise UsageError(f"cannot run {exe} for the config keys' defaults ({e.strerror}): {hint}") from None
    if r.returncode != 0:
        raise UsageError(f"{exe} help config --json: exit {r.returncode}: {r.stderr.strip()[-300:]}; {hint}")
    try:
        keys = json.loads(r.stdout)
    except ValueError as e:
        raise UsageError(f"{exe} help config --json: not JSON ({e}); {hint}") from None
    if not isinstance(keys, dict) or not all(isinstance(v, dict) for v in keys.values()):
        raise UsageError(f"{exe} help config --json: expected {{\"section\": {{\"key\": value}}}}")
    return keys


# Keys that take true, false or "auto".
SWITCHES = {"train.channels_last", "train.cuda_graph"}
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
# torch.compile's modes the peer scripts take (--compile-mode).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def add_compile_mode(parser, default="default"):
    """The peer scripts' --compile-mode, declared once."""
    parser.add_argument("--compile-mode", default=default, choices=COMPILE_MODES,
                        help=f"torch.compile's mode (default {default}; reduce-overhead replays the step's kernels "
                             "as CUDA graphs, the faster step in docs/python-module.md)")
EXIT_USAGE = 2


class UsageError(Exception):
    pass


def parse_value(text):
    """TOML value syntax, as pinfeed's overrides; a bare word is a string."""
    try:
        return tomllib.loads("v = " + text)["v"]
    except tomllib.TOMLDecodeError:
        return text


def set_key(cfg, dotted, value, where, raw=None):
    section, _, key = dotted.partition(".")
    known = defaults()
    if section not in known or key not in known[section]:
        raise UsageError(f"{where}: unknown config key '{dotted}' (pinfeed help config lists them)")
    default = known[section][key]
    if dotted in SWITCHES:
        if raw is not None and not isinstance(value, bool):
            value = raw
        ok = isinstance(value, bool) or value == "auto"
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:  # a string key: an override's bare word that TOML reads as another type is the string as written
        if not isinstance(value, str) and raw is not None:
            value = raw
        ok = isinstance(value, str)
    if not ok:
        raise UsageError(f"{where}: {dotted} must be a {type(default).__name__}, got {value!r}")
    cfg[section][key] = value


def load_config(path, overrides):
    if tomllib is None:
        raise UsageError("reading the config needs Python 3.11 or newer (tomllib)")
    cfg = {s: dict(keys) for s, keys in defaults().items()}
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    for section, keys in doc.items():
        if not isinstance(keys, dict):
            raise UsageError(f"{path}: '{section}' is not a [section]")
        for key, value in keys.items():
            set_key(cfg, f"{section}.{key}", value, path)
    for o in overrides:
        dotted, eq, text = o.partition("=")
        if not eq:
            raise UsageError(f"override '{o}': expected section.key=value")
        set_key(cfg, dotted.strip(), parse_value(text.strip()), f"override '{o}'", raw=text.strip())
    t, d, m = cfg["train"], cfg["data"], cfg["model"]
    if m["arch"] != "resnet50":
        raise UsageError(f"model.arch = {m['arch']!r}: only resnet50")
    if t["lr_schedule"] not in ("cosine", "triangular", "poly"):
        raise UsageError(f"train.lr_schedule must be cosine | triangular | poly, got {t['lr_schedule']!r}")
    if t["optimizer"] != "sgd":
        raise UsageError("train.optimizer = \"lars\" or \"lamb\" is pinfeed's alone: this reference trains with SGD")
    check_augmentation(cfg)
    if t["precision"] not in ("fp32", "tf32", "bf16", "fp16"):
        raise UsageError(f"train.precision must be fp32 | tf32 | bf16 | fp16, got {t['precision']!r}")
    if cfg["pipeline"]["transfer_dtype"] not in ("float32", "uint8"):
        raise UsageError(f"pipeline.transfer_dtype must be float32 | uint8, got {cfg['pipeline']['transfer_dtype']!r}")
    if not d["root"]:
        raise UsageError("data.root is empty")
    if t["epochs"] < 1 or t["batch_size"] < 1 or d["image_size"] < 1:
        raise UsageError("train.epochs, train.batch_size and data.image_size must be >= 1")
    if d["image_size_by_epoch"]:
        try:
            d["image_size_by_epoch"] = sides_text(parse_sides(d["image_size_by_epoch"]))
        except ValueError as e:
            raise UsageError(f"data.image_size_by_epoch {e}") from None
    problem = schedule_problem(d)
    if problem:
        raise UsageError(f"data.image_size schedule: {problem}")
    return cfg


def learning_rate(t, step, steps_per_epoch, scale):
    """engine/optim/lr_schedule.cpp, line for line."""
    lr, min_lr = t["lr"] * scale, t["min_lr"] * scale
    if t["lr_schedule"] == "triangular":
        def at_epoch(e):
            peak, end = t["warmup_epochs"], float(t["epochs"])
            if e >= end:
                return min_lr
            if e < peak:
                return 1e-4 * lr + (lr - 1e-4 * lr) * max(0.0, e) / peak
            return lr + (min_lr - lr) * (e - peak) / (end - peak)
        epoch, at = divmod(step, steps_per_epoch)
        a, b = at_epoch(float(epoch)), at_epoch(float(epoch + 1))
        return a + (b - a) * at / steps_per_epoch
    warmup = t["warmup_epochs"] * steps_per_epoch
    total = float(t["epochs"]) * steps_per_epoch
    if t["lr_schedule"] == "poly":
        it = float(step + 1)
        if it <= warmup:
            return lr * it / warmup
        progress = min(1.0, (it - warmup) / (total - warmup)) if total > warmup else 1.0
        return min_lr + (lr - min_lr) * (1 - progress) ** t["lr_poly_power"]
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / (total - warmup) if total > warmup else 1.0
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def default_workers():
    """pinfeed's data::default_workers for one process."""
    cores = os.cpu_count() or 1
    return cores - 3 if cores > 4 else max(1, cores - 1)



# data::parse_sides's bounds (app/config/keys.cpp: kMinImageSize, kMaxImageSize, kMaxEpochs).
MIN_SIDE, MAX_SIDE, MAX_EPOCHS = 16, 4096, 1_000_000
SIDE_ITEM = re.compile(r"\s*([0-9]+)\s*(?:\*\s*([0-9]+)\s*)?")


def parse_sides(text):
    """data/transform/side_schedule.cpp's parse_sides: "160*12, 192*4" -> 12 x 160 then 4 x 192."""
    out = []
    for item in text.split(","):
        m = SIDE_ITEM.fullmatch(item)
        if not m:
            raise ValueError(f'must be sides with optional epoch counts, e.g. "160*12, 192*4", got "{text}"')
        side, count = int(m.group(1)), int(m.group(2) or 1)
        if not MIN_SIDE <= side <= MAX_SIDE:
            raise ValueError(f"must hold sides in [{MIN_SIDE}, {MAX_SIDE}], got {side}")
        if count < 1 or len(out) + count > MAX_EPOCHS:
            raise ValueError(f"must give each side 1 to {MAX_EPOCHS} epochs in all, got {count}")
        out += [side] * count
    return out


def sides_text(sides):
    """parse_sides's inverse, as pinfeed writes it into the run folder's config.toml."""
    parts, i = [], 0
    while i < len(sides):
        j = i
        while j < len(sides) and sides[j] == sides[i]:
            j += 1
        parts.append(str(sides[i]) + (f"*{j - i}" if j - i > 1 else ""))
        i = j
    return ", ".join(parts)


def schedule_problem(d):
    """SideSchedule::problem: what is wrong with the ramp or the list ("" if nothing)."""
    lo, hi = d["image_size_min"], d["image_size_max"]
    ramp = lo > 0 and hi > 0
    if d["image_size_by_epoch"] and (lo > 0 or hi > 0):
        return "set either the ramp (min, max) or the list, not both"
    if (lo > 0) != (hi > 0):
        return "the ramp needs both its smallest and its largest side"
    if ramp and lo > hi:
        return f"the ramp's smallest side {lo} is over its largest {hi}"
    if ramp and d["ramp_start"] > d["ramp_end"]:
        return f"the ramp starts at epoch {d['ramp_start']}, after its end {d['ramp_end']}"
    return ""


def side_of_epoch(d, epoch):
    """The training side of `epoch` (from 0): SideSchedule::at, line for line. FFCV's get_resolution for the ramp
    (np.round halves to even, as Python's round and std::nearbyint do); the list's last side holds after it."""
    if d["image_size_by_epoch"]:
        sides = parse_sides(d["image_size_by_epoch"])
        return sides[min(epoch, len(sides) - 1)]
    lo, hi = d["image_size_min"], d["image_size_max"]
    if not (lo > 0 and hi > 0):
        return d["image_size"]
    start, end = d["ramp_start"], d["ramp_end"]
    if epoch <= start:
        return lo
    if epoch >= end:
        return hi
    t = (epoch - start) / (end - start)
    return int(round((lo + t * (hi - lo)) / d["ramp_step"])) * d["ramp_step"]


def sides_by_epoch(cfg):
    return [side_of_epoch(cfg["data"], e) for e in range(cfg["train"]["epochs"])]


# pinfeed's augmentation keys (pipeline/augment/options.cpp): the policy and the fill as it writes them back.
RAND_POLICY = re.compile(r"rand-(?:m([0-9]{1,2})-n([0-9]{1,2})|n([0-9]{1,2})-m([0-9]{1,2}))")
RAND_BINS, MAX_RAND_OPS = 31, 16


def parse_policy(text):
    """("", None) | ("trivial", None) | ("imagenet", None) | ("rand", (magnitude, ops))."""
    if text in ("", "trivial", "imagenet"):
        return text, None
    m = RAND_POLICY.fullmatch(text)
    if m:
        magnitude, ops = (int(m.group(1)), int(m.group(2))) if m.group(1) else (int(m.group(4)), int(m.group(3)))
        if magnitude < RAND_BINS and 1 <= ops <= MAX_RAND_OPS:
            return "rand", (magnitude, ops)
    raise UsageError(f'data.auto_augment must be "" (off), "trivial", "rand-mM-nN" (0 <= M <= 30, 1 <= N <= '
                     f'{MAX_RAND_OPS}) or "imagenet", got {text!r}')


def parse_fill(text):
    """None (zeros) or [R, G, B] in [0, 255]."""
    if not text:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in (1, 3) or not all(0 <= v <= 255 for v in values):
        raise UsageError(f'data.augment_fill must be "" (zeros), one value or "R,G,B", each in [0, 255], got {text!r}')
    return values * 3 if len(values) == 1 else values


def check_augmentation(cfg):
    d, t = cfg["data"], cfg["train"]
    kind, rand = parse_policy(d["auto_augment"])
    if kind == "rand":
        d["auto_augment"] = f"rand-m{rand[0]}-n{rand[1]}"
    fill = parse_fill(d["augment_fill"])
    if fill is not None:
        d["augment_fill"] = ",".join(f"{v:g}" for v in (fill[:1] if len(set(fill)) == 1 else fill))
    if d["augment_interpolation"] not in ("nearest", "bilinear"):
        raise UsageError(f"data.augment_interpolation must be nearest | bilinear, got {d['augment_interpolation']!r}")
    if d["random_erasing_value"] not in ("zero", "random"):
        raise UsageError(f"data.random_erasing_value must be zero | random, got {d['random_erasing_value']!r}")
    if (d["mixup_alpha"] > 0 or d["cutmix_alpha"] > 0) and t["batch_size"] % 2:
        raise UsageError(f"Mixup/CutMix (timm's, mode batch) needs an even train.batch_size, got {t['batch_size']}")

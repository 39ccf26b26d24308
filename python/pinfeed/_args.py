"""The checks of pinfeed.ImageFolderLoader's arguments, each against `pinfeed train`'s bounds for the same option:
TypeError, naming the argument, for a value of the wrong type; ValueError, naming it and its bounds, for a value
outside them. The class's docstring lists what is checked; these give the messages."""
import math
import numbers
import os
from collections.abc import Sequence

import torch  # before _C, as in __init__.py: its shared libraries (LibTorch) are the ones _C links

from . import _C

_LIMITS = _C.limits  # `pinfeed train`'s bounds for the same options (data/limits.h)
_INT64_MAX = 2**63 - 1  # the config keys' integers
_WHO = "pinfeed.ImageFolderLoader"


def _int(who, name, value, lo, hi, why=""):
    """value as an int in [lo, hi] (a bool, a float or a str refused), else TypeError or ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who}: {name} must be an int, got {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{who}: {name} must be in [{lo}, {hi}]{why}, got {value}")
    return int(value)


def _number(name, value, lo=-math.inf, hi=math.inf):
    """value as a finite float in [lo, hi] (a bool or a str refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{_WHO}: {name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{_WHO}: {name} must be " + (f"in [{lo}, {hi}]" if math.isfinite(lo) else "finite") +
                         f", got {value!r}")
    return v


def _numbers(name, value, count):
    """A tuple or list of `count` finite numbers, as a tuple of floats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{_WHO}: {name} must be a tuple of {count} numbers, got {type(value).__name__} {value!r}")
    if len(value) != count:
        raise ValueError(f"{_WHO}: {name} must have {count} values, got {len(value)}: {value!r}")
    return tuple(_number(f"{name}[{i}]", v) for i, v in enumerate(value))


def _flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{_WHO}: {name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _text(name, value):
    if not isinstance(value, str):
        raise TypeError(f"{_WHO}: {name} must be a str, got {type(value).__name__} {value!r}")
    return value


def _choice(name, value, choices):
    if _text(name, value) not in choices:
        raise ValueError(f"{_WHO}: {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _augment(train, dtype, auto_augment, interpolation, fill, erasing, erasing_value, mixup_alpha, cutmix_alpha,
             mixup_prob, switch_prob, label_smoothing):
    """The device augmentations' arguments, in the bounds of `pinfeed train`'s data.* keys of the same names."""
    a = dict(auto_augment=_text("auto_augment", auto_augment),
             augment_interpolation=_choice("augment_interpolation", interpolation, ("nearest", "bilinear")),
             random_erasing=_number("random_erasing", erasing, 0, 1),
             random_erasing_value=_choice("random_erasing_value", erasing_value, ("zero", "random")),
             mixup_alpha=_number("mixup_alpha", mixup_alpha, 0, _LIMITS["max_mix_alpha"]),
             cutmix_alpha=_number("cutmix_alpha", cutmix_alpha, 0, _LIMITS["max_mix_alpha"]),
             mixup_prob=_number("mixup_prob", mixup_prob, 0, 1),
             mixup_switch_prob=_number("mixup_switch_prob", switch_prob, 0, 1),
             label_smoothing=_number("label_smoothing", label_smoothing, 0, 1))
    if a["label_smoothing"] >= 1:
        raise ValueError(f"{_WHO}: label_smoothing must be in [0, 1), got {label_smoothing!r}")
    if fill is None:
        a["augment_fill"] = ""
    elif isinstance(fill, numbers.Real) and not isinstance(fill, bool):
        a["augment_fill"] = f"{_number('augment_fill', fill, 0, 255):.6f}"
    else:
        rgb = _numbers("augment_fill", fill, 3)
        if not all(0 <= v <= 255 for v in rgb):
            raise ValueError(f"{_WHO}: augment_fill must be a value or (R, G, B), each in [0, 255], got {fill!r}")
        a["augment_fill"] = ",".join(f"{v:.6f}" for v in rgb)
    mixing = a["mixup_alpha"] > 0 or a["cutmix_alpha"] > 0
    if not train and (a["auto_augment"] or a["random_erasing"] > 0 or mixing):
        raise ValueError(f"{_WHO}: validation batches (train=False) get no augmentations: leave auto_augment, "
                         "random_erasing, mixup_alpha and cutmix_alpha at their defaults")
    if dtype == torch.uint8 and (a["random_erasing"] > 0 or mixing):
        raise ValueError(f"{_WHO}: random_erasing, Mixup and CutMix work on normalised batches: dtype must be "
                         "torch.float32 or torch.float16, not torch.uint8")
    if a["label_smoothing"] > 0 and not mixing:
        raise ValueError(f"{_WHO}: label_smoothing is folded into Mixup/CutMix's soft targets; without mixing, "
                         "smooth the labels in the loss (torch.nn.CrossEntropyLoss(label_smoothing=...))")
    return a


def _sides(image_size, train):
    """image_size as its list of sides by epoch, each in data.image_size's bounds."""
    lo, hi = _LIMITS["min_image_size"], _LIMITS["max_image_size"]
    if isinstance(image_size, numbers.Integral) and not isinstance(image_size, bool):
        return [_int(_WHO, "image_size", image_size, lo, hi)]
    if isinstance(image_size, (str, bytes)) or not isinstance(image_size, Sequence):
        raise TypeError(f"{_WHO}: image_size must be an int or (training) a list of ints by epoch, got "
                        f"{type(image_size).__name__} {image_size!r}")
    if not 1 <= len(image_size) <= (_LIMITS["max_epochs"] if train else 1):
        raise ValueError(f"{_WHO}: image_size must list 1 to {_LIMITS['max_epochs'] if train else 1} sides "
                         f"(several only in training, by epoch), got {len(image_size)}")
    return [_int(_WHO, f"image_size[{i}]", s, lo, hi) for i, s in enumerate(image_size)]


def _local_ranks():
    """LOCAL_WORLD_SIZE: the processes sharing this host's cores and memory."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "1")
    try:
        ranks = int(text)
    except ValueError:
        raise ValueError(f"{_WHO}: LOCAL_WORLD_SIZE in the environment must be an int, got {text!r}") from None
    return _int(_WHO, "LOCAL_WORLD_SIZE in the environment", ranks, 1, _LIMITS["max_ranks"])


def _default_ranks():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1

"""pinfeed's data feed for PyTorch: ImageFolder batches decoded, augmented and copied to the device by pinfeed's C++
loader (the one `pinfeed train` uses), with the GIL released while it waits.

    import pinfeed, torch
    loader = pinfeed.ImageFolderLoader("/data/imagenet/train", batch_size=256, image_size=224, device="cuda",
                                       dtype=torch.float16, threads=8)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:   # (256, 3, 224, 224) float16 channels_last, (256,) int64, on the GPU
            ...

Stream contract (CUDA). Each batch is copied, and decoded where nvJPEG decodes, on the loader's own stream, a
batch or two ahead. `next()` returns it ready for the caller's current stream, torch.cuda.current_stream() at
the moment of the call: that stream waits for the batch's copy on the GPU through an event (cudaStreamWaitEvent);
the host never waits for the GPU. Use a batch on the stream that was current when it was taken, or make any other
stream wait for that one (torch.cuda.Stream.wait_stream) and call record_stream on the tensors for it, as for any
tensor made on another stream. The batch's device memory comes from PyTorch's caching allocator, marked with
record_stream for the consumer's stream: it is handed out again only once the tensors are freed and that stream
has passed the work queued on it until then, however long the caller keeps them or queues work behind them. The
loader's host buffers are reused only after their copy to the device has completed on the GPU (an event). A
batch's tensors are the caller's for as long as it keeps them; nothing the loader does later writes into them. On
the CPU, batches are ordinary tensors, the caller's own.

Hardware queues (CUDA). `import pinfeed` sets CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment, unless it is set
already or CUDA has started: CUDA reads it when it starts, and with its default of 8 queues the GPU decoder's work
can hold up the training step's kernels. Import pinfeed before the first CUDA call (a loader that decodes on the
GPU warns when CUDA started first with the default).

Several processes (torchrun, DDP): pass rank and world_size (the defaults come from an initialised
torch.distributed). Every rank draws the same permutation of the epoch and takes its own batch-sized runs of it,
so that N ranks of batch B see, step by step, the samples one rank of batch N*B would. With drop_last=True (the
default in training) every rank gets the same number of batches, len(loader); with drop_last=False every sample
comes exactly once, and the last global batch may leave some ranks a short batch or none.

Bad files (unreadable, truncated, not an image, over max_image_pixels or max_file_mb): on_bad_image="skip"
replaces each by another sample drawn from the seed and lists it in `bad_images` as (path, reason);
on_bad_image="fail" raises pinfeed.DataError naming the file. A worker busy on one file for longer than
sample_timeout_s (a read that never returns) raises pinfeed.StuckSampleError naming it. Ctrl-C raises
KeyboardInterrupt out of a wait for a batch, also while a worker is stuck. After any of these, and after a loop
left early (Ctrl-C or an exception in its body, a break), the same iterator or a new `for` loop over the loader
continues the epoch at its first batch not delivered (so `next(iter(loader))` takes a batch of the epoch).

pinfeed.watch(loader) wraps any loader (this one, a DataLoader, DALI's iterator) and reports per epoch the host's
wait for batches, the GPU's idle share between steps and samples/s (pinfeed/watch.py); `python -m pinfeed.compare`
trains one model from each feed in turn and tabulates those figures (pinfeed/compare.py).
"""
import os
import warnings
from collections.abc import Mapping, Sequence

import torch  # first: its shared libraries (LibTorch) are the ones the extension module links

from . import _C
from ._C import CheckpointError, DataError, StuckSampleError
from ._args import (_INT64_MAX, _LIMITS, _WHO, _augment, _default_ranks, _flag, _int, _local_ranks, _number,
                    _numbers, _sides, _text)
from .watch import Watch, watch

__all__ = ["ImageFolderLoader", "load_weights", "watch", "Watch", "CheckpointError", "DataError", "StuckSampleError"]

# The GPU decoder's streams on hardware queues of their own, not behind the training step's (CUDA's default is 8),
# as `pinfeed train` asks: read when CUDA starts, so set at import unless the caller chose or CUDA already runs.
_QUEUES = "CUDA_DEVICE_MAX_CONNECTIONS"
_QUEUES_TOO_LATE = torch.cuda.is_initialized() and _QUEUES not in os.environ
if torch.version.cuda and not torch.cuda.is_initialized():
    os.environ.setdefault(_QUEUES, "32")

if torch.__version__.split("+")[0] != _C.torch_version:
    raise ImportError(f"pinfeed was built against torch {_C.torch_version} but torch {torch.__version__} is "
                      "imported; rebuild it (pip install --no-build-isolation --force-reinstall .)")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.uint8: "uint8"}
_STATE_KEYS = ("seed", "batch_size", "world_size", "dataset_size", "shuffle", "drop_last")


class ImageFolderLoader:
    """Batches (images, labels) from an ImageFolder split, root/<class>/<image> (.jpg, .jpeg, .png), classes sorted
    by name as torchvision.datasets.ImageFolder labels them.

    train=True: torchvision's RandomResizedCrop(image_size, scale, ratio) and RandomHorizontalFlip, drawn per sample
    from (seed, epoch); False: resize the shorter side to image_size / val_resize_ratio and centre crop image_size.
    image_size may also be a list of sides by epoch (the last one for every later epoch), for training.
    Batches are (B, 3, S, S) of `dtype` on `device`, channels_last strides if asked, normalised with mean and std
    (0-1 pixel scale) for float32 and float16; uint8 gives the pixels as they are. Labels are (B,) int64.
    decoder: "cpu" (libjpeg-turbo in the worker threads), "nvjpeg" (the GPU decodes JPEGs: CUDA, float16/float32,
    built with nvJPEG) or "auto" (nvjpeg where it can run). threads: decode threads (None: the host's cores less
    three, shared among the LOCAL_WORLD_SIZE processes of this host, as `pinfeed train` chooses).
    The module's docstring states the stream contract, the ranks' shares and what happens with bad files.

    Training batches get `pinfeed train`'s device augmentations, with the data.* keys' names and meanings:
    auto_augment ("" | "trivial" | "rand-mM-nN" | "imagenet", torchvision's TrivialAugmentWide, RandAugment,
    AutoAugment on the uint8 pixels; augment_interpolation "nearest" | "bilinear", augment_fill None, a value or
    (R, G, B)), random_erasing (torchvision's RandomErasing probability, on the normalised batch;
    random_erasing_value "zero" | "random") and timm's Mixup/CutMix in batch mode (mixup_alpha, cutmix_alpha,
    mixup_prob, mixup_switch_prob). With mixing on, labels are soft targets (B, classes) float32, label_smoothing
    folded in as timm's mixup_target does: train with torch.nn.CrossEntropyLoss() on them, which takes
    probabilities. The same seed draws the same augmentations as `pinfeed train` with the same options.

    Every argument is checked before anything is allocated, against `pinfeed train`'s bounds for the same option
    (batch_size: train.batch_size; image_size: data.image_size; threads: data.workers and its limit per core;
    seed: train.seed; prefetch_batches, val_resize_ratio, scale, sample_timeout_s, nvjpeg_share, max_image_pixels,
    max_file_mb: the data.* key of that name). TypeError, naming the argument, for a value of the wrong type: an int
    argument refuses a bool, a float or a str, a flag anything but True or False; mean, std, scale and ratio are
    tuples of finite numbers. ValueError, naming the argument and its bounds, for a value outside them (also std > 0,
    scale's and ratio's min <= max, ratio > 0, rank in [0, world_size)), and, as `pinfeed train` does, for a host
    batch ring ((prefetch_batches + 2) batches on each of the host's LOCAL_WORLD_SIZE ranks) over half the memory:
    "pinfeed.ImageFolderLoader: prefetch_batches must be in [1, 1024], got 1000000000".
    """

    def __init__(self, root, batch_size, image_size, *, train=True, decoder="auto", threads=None, device=None,
                 channels_last=True, dtype=torch.float32, mean=IMAGENET_MEAN, std=IMAGENET_STD, shuffle=None, seed=0,
                 drop_last=None, rank=None, world_size=None, on_bad_image="skip", classes=None, prefetch_batches=4,
                 sample_timeout_s=300.0, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), hflip=True, val_resize_ratio=0.875,
                 crop_decode=True, max_image_pixels=100_000_000, max_file_mb=256, nvjpeg_share=1.0,
                 auto_augment="", augment_interpolation="nearest", augment_fill=None, random_erasing=0.0,
                 random_erasing_value="zero", mixup_alpha=0.0, cutmix_alpha=0.0, mixup_prob=1.0, mixup_switch_prob=0.5,
                 label_smoothing=0.0, _stall_sample=-1):
        try:
            root = os.fspath(root)
        except TypeError:
            raise TypeError(f"{_WHO}: root must be a path, got {type(root).__name__} {root!r}") from None
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root} is not a directory (an ImageFolder split: root/<class>/<image>)")
        train = _flag("train", train)
        sides = _sides(image_size, train)
        batch_size = _int(_WHO, "batch_size", batch_size, 1, _LIMITS["max_batch_size"])
        prefetch_batches = _int(_WHO, "prefetch_batches", prefetch_batches, 1, _LIMITS["max_prefetch_batches"])
        if threads is not None:
            threads = _int(_WHO, "threads", threads, 1, _LIMITS["max_threads"],
                           f" (at most {_LIMITS['threads_per_core']} per core, {_LIMITS['cores']} cores here)")
        if not isinstance(dtype, torch.dtype) or dtype not in _DTYPES:
            raise ValueError(f"{_WHO}: dtype must be torch.float32, torch.float16 or torch.uint8, not {dtype!r}")
        if device is not None and not isinstance(device, (str, torch.device)):
            raise TypeError(f"{_WHO}: device must be a str or a torch.device, got {type(device).__name__} {device!r}")
        try:
            device = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
        except RuntimeError as e:
            raise ValueError(f"{_WHO}: device {device!r}: {e}") from None
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"{_WHO}: device {device}: CUDA is not available")
            device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        elif device.type != "cpu":
            raise ValueError(f"{_WHO}: device must be cpu or cuda, not {device}")
        mean = _numbers("mean", mean, 3)
        std = _numbers("std", std, 3)
        if min(std) <= 0:
            raise ValueError(f"{_WHO}: std must be > 0 in each channel, got {std}")
        scale = _numbers("scale", scale, 2)
        if not _LIMITS["min_scale"] <= scale[0] <= scale[1] <= 1:
            raise ValueError(f"{_WHO}: scale must be (min, max) with {_LIMITS['min_scale']} <= min <= max <= 1, "
                             f"got {scale}")
        ratio = _numbers("ratio", ratio, 2)
        if not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"{_WHO}: ratio must be (min, max) with 0 < min <= max, got {ratio}")
        val_resize_ratio = _number("val_resize_ratio", val_resize_ratio, _LIMITS["min_val_resize_ratio"], 1)
        sample_timeout_s = _number("sample_timeout_s", sample_timeout_s, 0, _LIMITS["max_sample_timeout_s"])
        nvjpeg_share = _number("nvjpeg_share", nvjpeg_share, 0, 1)
        seed = _int(_WHO, "seed", seed, 0, _INT64_MAX)
        max_image_pixels = _int(_WHO, "max_image_pixels", max_image_pixels, 0, _INT64_MAX)
        max_file_mb = _int(_WHO, "max_file_mb", max_file_mb, 0, _LIMITS["max_megabytes"])
        if classes is not None and (isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence) or
                                    not all(isinstance(c, str) for c in classes)):
            raise TypeError(f"{_WHO}: classes must be a list of str, got {classes!r}")
        flags = {name: _flag(name, value) for name, value in
                 (("channels_last", channels_last), ("hflip", hflip), ("crop_decode", crop_decode))}
        self.shuffle = train if shuffle is None else _flag("shuffle", shuffle)
        self.drop_last = train if drop_last is None else _flag("drop_last", drop_last)
        default_rank, default_world = _default_ranks()
        world_size = _int(_WHO, "world_size", default_world if world_size is None else world_size, 1,
                          _LIMITS["max_ranks"])
        rank = _int(_WHO, "rank", default_rank if rank is None else rank, 0, world_size - 1,
                    f" (world_size {world_size})")
        words = {name: _text(name, value) for name, value in (("decoder", decoder), ("on_bad_image", on_bad_image))}
        augment = _augment(train, dtype, auto_augment, augment_interpolation, augment_fill, random_erasing,
                           random_erasing_value, mixup_alpha, cutmix_alpha, mixup_prob, mixup_switch_prob,
                           label_smoothing)
        host_ranks = _local_ranks()
        _stall_sample = _int(_WHO, "_stall_sample", _stall_sample, -1, _INT64_MAX)
        self.batch_size, self.seed, self.world_size, self.rank = batch_size, seed, world_size, rank
        self.device, self.dtype, self.train = device, dtype, train
        try:
            self._feed = _C.Feed(
                root=root, classes=list(classes or []), train=train, batch_size=batch_size, image_sizes=sides,
                threads=threads or 0, host_ranks=host_ranks, device=str(device), dtype=_DTYPES[dtype],
                mean=list(mean), std=list(std), shuffle=self.shuffle, seed=seed, drop_last=self.drop_last, rank=rank,
                world_size=world_size, prefetch_batches=prefetch_batches, sample_timeout_s=sample_timeout_s,
                scale=scale, ratio=ratio, val_resize_ratio=val_resize_ratio, max_image_pixels=max_image_pixels,
                max_file_bytes=max_file_mb << 20, nvjpeg_share=nvjpeg_share, stall_sample=_stall_sample,
                **flags, **words, **augment)
        except ValueError as e:  # options that cannot work together, the host ring over half the memory
            raise ValueError(f"{_WHO}: {e}") from None
        if _QUEUES_TOO_LATE and device.type == "cuda" and self._feed.decoder == "nvjpeg":
            warnings.warn(f"CUDA started before `import pinfeed`, with its default 8 hardware queues: the GPU "
                          f"decoder's work can hold up the training step's. Import pinfeed before any CUDA call, or "
                          f"set {_QUEUES}=32 in the environment", RuntimeWarning, stacklevel=2)
        self._epoch = 0       # the epoch the next pass reads
        self._start_at = 0    # the batch it starts at (load_state_dict)
        self._pass = None     # [epoch, batches delivered, generation] of the pass under way or left unfinished
        self._generation = 0  # a new iterator, or load_state_dict, ends the ones before
        self._restart = False  # the pass must be started again at its position (after an error or Ctrl-C)
        self._bad = []

    def __len__(self):
        """Batches per epoch on this rank."""
        return self._feed.batches_per_epoch

    def __iter__(self):
        """The rest of the pass under way, if one was left before its end (Ctrl-C, an error, a break): from its
        first batch not delivered. Else a new pass: the epoch's batches from its saved position (load_state_dict)
        or from the first. An iterator taken earlier ends."""
        self._generation += 1
        if self._pass is None:
            self._pass = [self._epoch, self._start_at, self._generation]
            self._start_at = 0
            self._restart = True
        self._pass[2] = self._generation
        return _Iterator(self, self._generation)

    def set_epoch(self, epoch):
        """The epoch the next pass reads (its order and its augmentations). The loader advances it by itself after
        each whole pass. Another epoch than the current one drops a pass left unfinished; the same one keeps it, and
        a resumed position (load_state_dict). TypeError or ValueError for an epoch that is not an int in
        train.epochs' bounds."""
        epoch = _int(f"{_WHO}.set_epoch", "epoch", epoch, 0, _LIMITS["max_epochs"])
        if epoch != self._epoch:
            self._epoch, self._start_at, self._pass = epoch, 0, None

    def state_dict(self):
        """Where the batches stand: the epoch and the batches of it already delivered. A loader of the same dataset,
        seed, batch size and ranks given it by load_state_dict delivers the very batches this one would next."""
        epoch, batch = (self._pass[0], self._pass[1]) if self._pass else (self._epoch, self._start_at)
        return {"epoch": epoch, "batch": batch, "seed": self.seed, "batch_size": self.batch_size,
                "world_size": self.world_size, "dataset_size": self._feed.dataset_size, "shuffle": self.shuffle,
                "drop_last": self.drop_last}

    def load_state_dict(self, state):
        """Continue from a state_dict(). TypeError or ValueError naming the field for one missing, of the wrong
        type or out of range (epoch in train.epochs' bounds, batch within the epoch), and for one of another
        loader (seed, batch_size, world_size, dataset_size, shuffle, drop_last)."""
        who = f"{_WHO}.load_state_dict"
        if not isinstance(state, Mapping):
            raise TypeError(f"{who}: state must be a dict (from state_dict()), got {type(state).__name__}")
        mine = self.state_dict()
        bounds = {"epoch": (0, _LIMITS["max_epochs"])}  # train.epochs'; batch's below, once it is of this loader
        for key, value in mine.items():
            if key not in state:
                raise ValueError(f"{who}: state has no {key!r}")
            if isinstance(value, bool) and not isinstance(state[key], bool):
                raise TypeError(f"{who}: {key} must be True or False, got {state[key]!r}")
            if not isinstance(value, bool):
                _int(who, key, state[key], *bounds.get(key, (-_INT64_MAX - 1, _INT64_MAX)))
        differ = [k for k in _STATE_KEYS if state[k] != mine[k]]
        if differ:
            raise ValueError(f"{who}: state_dict of another loader: " +
                             ", ".join(f"{k} {state[k]!r} (this loader: {mine[k]!r})" for k in differ))
        batch = _int(who, "batch", state["batch"], 0, len(self), f" (this epoch's {len(self)} batches)")
        self._epoch, self._start_at, self._pass = int(state["epoch"]), batch, None
        self._generation += 1

    @property
    def bad_images(self):
        """The bad files met so far, each once, as (path, reason), in the order found."""
        self._bad.extend(self._feed.take_bad_images())
        return list(self._bad)

    @property
    def classes(self):
        return self._feed.classes

    @property
    def dataset_size(self):
        """Samples in the folder (all ranks)."""
        return self._feed.dataset_size

    @property
    def decoder(self):
        """What decodes JPEGs: "cpu" or "nvjpeg" (decoder="auto" resolved)."""
        return self._feed.decoder

    @property
    def mode(self):
        """How batches cross to the device: the transfer mode that runs ("dual_stream" on CUDA, "pageable" on the CPU)."""
        return self._feed.mode

    @property
    def threads(self):
        return self._feed.workers

    def queue_depth(self):
        """What waits ahead of the consumer now, as a dict: "copied" (batches on the device already, dual_stream's
        copier, at most 2), "decoded" (in the host ring, every sample loaded) and "loading" (opened, samples still
        loading). pinfeed.watch samples it after each batch it hands out (the record's queue_* fields)."""
        copied, decoded, loading = self._feed.queue_depth()
        return {"copied": copied, "decoded": decoded, "loading": loading}

    def close(self):
        """Stops the worker threads now (garbage collection does it otherwise)."""
        self._feed.close()

    def _next(self, generation):
        if self._pass is None or self._pass[2] != generation:
            raise RuntimeError("this iterator's pass is over: a new pass or load_state_dict began since")
        epoch, position, _ = self._pass
        if self._restart:
            self._feed.start(epoch, position)
            self._restart = False
        try:
            batch = self._feed.next()
        except BaseException:
            self._restart = True  # KeyboardInterrupt, a bad or stuck file: the next call resumes at this batch
            raise
        if batch is None:
            self._pass = None
            if self._epoch == epoch:
                self._epoch += 1
            raise StopIteration
        self._pass[1] += 1
        return batch

    def _release_stall(self):  # test seam: lets the worker held by _stall_sample go on
        self._feed.release_stall()


class _Iterator:
    def __init__(self, loader, generation):
        self._loader, self._generation = loader, generation

    def __iter__(self):
        return self

    def __next__(self):
        return self._loader._next(self._generation)

    def __len__(self):
        return len(self._loader)


def load_weights(path):
    """The weights of a pinfeed checkpoint (last.pt, best.pt) or of a state dict saved with torch.save, read by
    pinfeed's own reader, which unpickles no code: a dict {"model": {name: Tensor}, "classes": [str] (the training
    folders' names; [] for a state dict), "config": str (the run's resolved TOML; "" for a state dict), "checkpoint":
    bool}. ``model.load_state_dict(pinfeed.load_weights(p)["model"])`` loads them into torchvision's ResNet-50.
    Raises CheckpointError (a ValueError) for a file that is neither, DataError for a damaged one."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return _C.load_weights(os.fspath(path))

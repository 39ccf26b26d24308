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
KeyboardInterrupt out of a wait for a batch, also while a worker is stuck. After any of these, iterating again
resumes at the batch that was not delivered.
"""
import os
import warnings

import torch  # first: its shared libraries (LibTorch) are the ones the extension module links

from . import _C
from ._C import DataError, StuckSampleError

__all__ = ["ImageFolderLoader", "DataError", "StuckSampleError"]

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


def _default_ranks():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


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
    """

    def __init__(self, root, batch_size, image_size, *, train=True, decoder="auto", threads=None, device=None,
                 channels_last=True, dtype=torch.float32, mean=IMAGENET_MEAN, std=IMAGENET_STD, shuffle=None, seed=0,
                 drop_last=None, rank=None, world_size=None, on_bad_image="skip", classes=None, prefetch_batches=4,
                 sample_timeout_s=300.0, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), hflip=True, val_resize_ratio=0.875,
                 crop_decode=True, max_image_pixels=100_000_000, max_file_mb=256, nvjpeg_share=1.0,
                 _stall_sample=-1):
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root} is not a directory (an ImageFolder split: root/<class>/<image>)")
        sides = [int(image_size)] if isinstance(image_size, int) else [int(s) for s in image_size]
        if not sides or min(sides) < 1 or (not train and len(sides) > 1):
            raise ValueError("image_size: a positive side, or (training) a list of sides by epoch")
        if batch_size < 1 or prefetch_batches < 1 or (threads is not None and threads < 1):
            raise ValueError("batch_size, prefetch_batches and threads must be >= 1")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be torch.float32, torch.float16 or torch.uint8, not {dtype}")
        device = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"device {device}: CUDA is not available")
            device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        elif device.type != "cpu":
            raise ValueError(f"device must be cpu or cuda, not {device}")
        default_rank, default_world = _default_ranks()
        rank = default_rank if rank is None else rank
        world_size = default_world if world_size is None else world_size
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size {world_size})")
        self.batch_size, self.seed, self.world_size, self.rank = batch_size, seed, world_size, rank
        self.shuffle = train if shuffle is None else bool(shuffle)
        self.drop_last = train if drop_last is None else bool(drop_last)
        self.device, self.dtype, self.train = device, dtype, train
        self._feed = _C.Feed(
            root=root, classes=list(classes or []), train=bool(train), batch_size=int(batch_size), image_sizes=sides,
            decoder=decoder, threads=int(threads or 0), host_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            device=str(device), channels_last=bool(channels_last), dtype=_DTYPES[dtype], mean=list(mean),
            std=list(std), shuffle=self.shuffle, seed=int(seed), drop_last=self.drop_last, rank=int(rank),
            world_size=int(world_size), on_bad_image=on_bad_image, prefetch_batches=int(prefetch_batches),
            sample_timeout_s=float(sample_timeout_s), scale=tuple(scale), ratio=tuple(ratio), hflip=bool(hflip),
            val_resize_ratio=float(val_resize_ratio), crop_decode=bool(crop_decode),
            max_image_pixels=int(max_image_pixels), max_file_bytes=int(max_file_mb * (1 << 20)),
            nvjpeg_share=float(nvjpeg_share), stall_sample=int(_stall_sample))
        if _QUEUES_TOO_LATE and device.type == "cuda" and self._feed.decoder == "nvjpeg":
            warnings.warn(f"CUDA started before `import pinfeed`, with its default 8 hardware queues: the GPU "
                          f"decoder's work can hold up the training step's. Import pinfeed before any CUDA call, or "
                          f"set {_QUEUES}=32 in the environment", RuntimeWarning, stacklevel=2)
        self._epoch = 0       # the epoch the next pass reads
        self._start_at = 0    # the batch it starts at (load_state_dict)
        self._pass = None     # [epoch, batches delivered, generation] of the pass under way
        self._generation = 0  # a new pass, or load_state_dict, ends the iterators of the one before
        self._restart = False  # the pass must be started again at its position (after an error or Ctrl-C)
        self._bad = []

    def __len__(self):
        """Batches per epoch on this rank."""
        return self._feed.batches_per_epoch

    def __iter__(self):
        self._generation += 1
        epoch, first = self._epoch, self._start_at
        self._start_at = 0
        self._pass = [epoch, first, self._generation]
        self._restart = True
        return _Iterator(self, self._generation)

    def set_epoch(self, epoch):
        """The epoch the next pass reads (its order and its augmentations). The loader advances it by itself after
        each whole pass; a resumed position (load_state_dict) is kept when the epoch is the saved one."""
        if epoch != self._epoch:
            self._epoch, self._start_at = int(epoch), 0

    def state_dict(self):
        """Where the batches stand: the epoch and the batches of it already delivered. A loader of the same dataset,
        seed, batch size and ranks given it by load_state_dict delivers the very batches this one would next."""
        epoch, batch = (self._pass[0], self._pass[1]) if self._pass else (self._epoch, self._start_at)
        return {"epoch": epoch, "batch": batch, "seed": self.seed, "batch_size": self.batch_size,
                "world_size": self.world_size, "dataset_size": self._feed.dataset_size, "shuffle": self.shuffle,
                "drop_last": self.drop_last}

    def load_state_dict(self, state):
        mine = self.state_dict()
        differ = [k for k in _STATE_KEYS if state.get(k) != mine[k]]
        if differ:
            raise ValueError("state_dict of another loader: " +
                             ", ".join(f"{k} {state.get(k)!r} (this loader: {mine[k]!r})" for k in differ))
        if not 0 <= state["batch"] <= len(self):
            raise ValueError(f"state_dict batch {state['batch']} is outside this epoch's {len(self)} batches")
        self._epoch, self._start_at, self._pass = int(state["epoch"]), int(state["batch"]), None
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
    def threads(self):
        return self._feed.workers

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

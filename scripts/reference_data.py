"""The data of scripts/reference_train.py: batches on the device, ready for the model, for each epoch at its side.

- "dataloader" (default): torchvision ImageFolder + DataLoader. Train: RandomResizedCrop(side, scale = (data.scale_min,
  data.scale_max), ratio = (3/4, 4/3)) + RandomHorizontalFlip (data.hflip) + data.auto_augment (torchvision's
  TrivialAugmentWide / RandAugment(N, M, 31 bins) / AutoAugment(IMAGENET), data.augment_interpolation and
  data.augment_fill) in the workers; val Resize(floor(S / data.val_resize_ratio)) + CenterCrop(S). One DataLoader
  per training side (shuffled, drop_last, persistent workers), built when its first epoch comes and dropped once no
  later epoch has its side: a new side costs its workers' start, as it costs pinfeed nothing but a new batch shape.
  pipeline.transfer_dtype "float32": ToTensor + Normalize in the workers; "uint8": PILToTensor, normalised on the
  device (pinfeed's uint8 transfer).
- "dali": NVIDIA DALI, as scripts/reference_dali.py builds its pipeline: fn.readers.file (random_shuffle) +
  fn.decoders.image_random_crop(device="mixed") + fn.resize(side x side) + fn.crop_mirror_normalize (coin-flip
  mirror, ImageNet mean/std, HWC under channels_last, FLOAT16 under bf16/fp16); one pipeline per side, its epochs
  the reader's (LastBatchPolicy.DROP). Val: fn.decoders.image(device="mixed") + fn.resize(resize_shorter) +
  crop_mirror_normalize(crop S x S, centred), every sample once (pad_last_batch, PARTIAL). On the CPU (a smoke
  test) the decoders run with device="cpu". data.auto_augment is not followed there (DALI's policies are its own).
Imported only when asked; without nvidia.dali: one line and exit code 3.
"""
import copy
import math
import os
import sys

from reference_config import MEAN, STD, parse_fill, parse_policy, side_of_epoch

EXIT_NO_DALI = 3
DALI_PACKAGE = "nvidia-dali-cuda130"


class GpuNormalize:
    """uint8 (B, 3, H, W) on the device -> float (x / 255 - mean) / std in the model's memory format."""

    def __init__(self, torch, device, fmt):
        self.mean = torch.tensor([255 * m for m in MEAN], device=device).view(1, 3, 1, 1)
        self.inv_std = torch.tensor([1 / (255 * s) for s in STD], device=device).view(1, 3, 1, 1)
        self.fmt = fmt

    def __call__(self, x):
        return x.contiguous(memory_format=self.fmt).float().sub_(self.mean).mul_(self.inv_std)


def auto_augment_transform(d):
    """data.auto_augment as torchvision's transform on the PIL crop, or None."""
    from torchvision import transforms
    kind, rand = parse_policy(d["auto_augment"])
    if not kind:
        return None
    mode = {"nearest": transforms.InterpolationMode.NEAREST,
            "bilinear": transforms.InterpolationMode.BILINEAR}[d["augment_interpolation"]]
    fill = parse_fill(d["augment_fill"])
    if kind == "trivial":
        return transforms.TrivialAugmentWide(interpolation=mode, fill=fill)
    if kind == "imagenet":
        return transforms.AutoAugment(transforms.AutoAugmentPolicy.IMAGENET, interpolation=mode, fill=fill)
    return transforms.RandAugment(num_ops=rand[1], magnitude=rand[0], num_magnitude_bins=31, interpolation=mode,
                                  fill=fill)


class DataLoaderData:
    """torchvision's ImageFolder through DataLoader workers; train(epoch) and val() yield device-ready batches."""

    name = "dataloader"

    def __init__(self, torch, cfg, args, device, fmt, workers):
        import torchvision
        from torchvision import transforms
        self.torch, self.cfg, self.device, self.cuda = torch, cfg, device, device.type == "cuda"
        d, t = cfg["data"], cfg["train"]
        uint8 = cfg["pipeline"]["transfer_dtype"] == "uint8"
        self.to_tensor = [transforms.PILToTensor()] if uint8 else [transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
        self.prepare = GpuNormalize(torch, device, fmt) if uint8 else (lambda x: x.contiguous(memory_format=fmt))
        root = os.path.expanduser(d["root"])
        self.train_set = torchvision.datasets.ImageFolder(os.path.join(root, d["train_split"]))  # scanned once
        self.classes = self.train_set.classes
        self.train_size = len(self.train_set)
        self.loader_kw = dict(batch_size=t["batch_size"], num_workers=workers, pin_memory=self.cuda,
                              persistent_workers=workers > 0,
                              prefetch_factor=args.prefetch_factor if workers > 0 else None)
        self.generator = torch.Generator().manual_seed(t["seed"])  # one stream for every side's shuffles
        self.augment = auto_augment_transform(d)
        self.loaders = {}  # side -> its DataLoader
        self.val_set = self.val_loader = None
        if t["eval"]:
            size = d["val_image_size"] or d["image_size"]
            val_tf = transforms.Compose([transforms.Resize(math.floor(size / d["val_resize_ratio"])),
                                         transforms.CenterCrop(size)] + self.to_tensor)
            self.val_set = torchvision.datasets.ImageFolder(os.path.join(root, d["val_split"]), val_tf)
            self.val_classes = self.val_set.classes
            self.val_loader = torch.utils.data.DataLoader(self.val_set, shuffle=False, drop_last=False,
                                                          **self.loader_kw)
        self.steps_per_epoch = self.train_size // t["batch_size"]

    def train_transform(self, side):
        from torchvision import transforms
        d = self.cfg["data"]
        return transforms.Compose(
            [transforms.RandomResizedCrop(side, scale=(d["scale_min"], d["scale_max"]), ratio=(3 / 4, 4 / 3))]
            + ([transforms.RandomHorizontalFlip()] if d["hflip"] else []) + ([self.augment] if self.augment else [])
            + self.to_tensor)

    def train(self, epoch, steps):
        d, epochs = self.cfg["data"], self.cfg["train"]["epochs"]
        side = side_of_epoch(d, epoch)
        later = {side_of_epoch(d, e) for e in range(epoch, epochs)}
        for old in [s for s in self.loaders if s not in later]:
            del self.loaders[old]  # its persistent workers end with it
        if side not in self.loaders:
            dataset = copy.copy(self.train_set)  # the scanned file list shared, the side's own transform
            dataset.transform = self.train_transform(side)
            self.loaders[side] = self.torch.utils.data.DataLoader(dataset, shuffle=True, drop_last=True,
                                                                  generator=self.generator, **self.loader_kw)
        for step, (x, y) in enumerate(self.loaders[side]):
            yield self.prepare(x.to(self.device, non_blocking=True)), y.to(self.device, non_blocking=True)
            if step + 1 == steps:
                break

    def val(self):
        for x, y in self.val_loader:
            yield self.prepare(x.to(self.device, non_blocking=True)), y.to(self.device, non_blocking=True)


def import_dali():
    """DALI and its PyTorch plugin, or one line and exit 3."""
    try:
        import nvidia.dali  # noqa: F401
        from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: F401
    except ImportError as e:
        print(f"error: --loader dali needs NVIDIA DALI, which is not importable ({e}): pip install {DALI_PACKAGE} "
              "(CUDA 13 build; nvidia-dali-cuda120 for CUDA 12) into the Python that has torch, or use --loader "
              "dataloader", file=sys.stderr)
        sys.exit(EXIT_NO_DALI)


class DaliData:
    """DALI pipelines (one per training side, one for val); train(epoch) and val() yield device-ready batches."""

    name = "dali"

    def __init__(self, torch, cfg, args, device, fmt, workers):
        import_dali()
        d, t = cfg["data"], cfg["train"]
        if d["auto_augment"]:
            raise ValueError("data.auto_augment is not followed with --loader dali (DALI's policies are not "
                             "torchvision's): use --loader dataloader")
        self.torch, self.cfg, self.device, self.cuda = torch, cfg, device, device.type == "cuda"
        self.threads, self.hw_load = workers, args.dali_hw_load
        self.channels_last = fmt == torch.channels_last
        self.half = t["precision"] in ("bf16", "fp16")
        root = os.path.expanduser(d["root"])
        self.train_root, self.val_root = os.path.join(root, d["train_split"]), os.path.join(root, d["val_split"])
        self.classes = sorted(e.name for e in os.scandir(self.train_root) if e.is_dir())
        self.train_size = sum(1 for c in self.classes for e in os.scandir(os.path.join(self.train_root, c))
                              if e.is_file())
        self.steps_per_epoch = self.train_size // t["batch_size"]
        self.pipes = {}  # side -> (pipeline, iterator)
        self.val_pipe = self.val_iter = None
        if t["eval"]:
            self.val_classes = sorted(e.name for e in os.scandir(self.val_root) if e.is_dir())
            size = d["val_image_size"] or d["image_size"]
            self.val_pipe, self.val_iter = self.build(self.val_pipeline, size, math.floor(size / d["val_resize_ratio"]),
                                                      policy="PARTIAL")

    def normalise(self, images, **crop):
        from nvidia.dali import fn, types
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT16 if self.half else types.FLOAT,
                                        output_layout="HWC" if self.channels_last else "CHW",
                                        mean=[255 * m for m in MEAN], std=[255 * s for s in STD], **crop)

    def decoder_device(self):
        return "mixed" if self.cuda else "cpu"

    def train_pipeline(self, side, _):
        from nvidia.dali import fn, types
        d = self.cfg["data"]
        jpegs, labels = fn.readers.file(file_root=self.train_root, random_shuffle=True, name="Reader")
        load = {"hw_decoder_load": self.hw_load} if self.cuda and self.hw_load is not None else {}
        images = fn.decoders.image_random_crop(jpegs, device=self.decoder_device(), output_type=types.RGB,
                                               random_area=[d["scale_min"], d["scale_max"]],
                                               random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10, **load)
        images = fn.resize(images, resize_x=side, resize_y=side)  # linear, antialiased
        mirror = fn.random.coin_flip(probability=0.5) if d["hflip"] else 0
        return self.normalise(images, mirror=mirror), labels.gpu() if self.cuda else labels

    def val_pipeline(self, side, resize):
        from nvidia.dali import fn, types
        jpegs, labels = fn.readers.file(file_root=self.val_root, random_shuffle=False, pad_last_batch=True,
                                        name="Reader")
        images = fn.decoders.image(jpegs, device=self.decoder_device(), output_type=types.RGB)
        images = fn.resize(images, resize_shorter=resize)
        images = self.normalise(images, crop=(side, side), mirror=0)
        return images, labels.gpu() if self.cuda else labels

    def build(self, graph, side, resize=None, policy="DROP"):
        from nvidia.dali import pipeline_def
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator
        t = self.cfg["train"]
        @pipeline_def
        def pipeline():
            return graph(side, resize)

        pipe = pipeline(
            batch_size=t["batch_size"], num_threads=self.threads, device_id=self.device.index if self.cuda else None,
            seed=t["seed"] * 1000 + side + 1)
        pipe.build()
        it = DALIGenericIterator([pipe], ["data", "label"], reader_name="Reader", auto_reset=True,
                                 last_batch_policy=getattr(LastBatchPolicy, policy))
        return pipe, it

    def batches(self, iterator, steps=None):
        for step, out in enumerate(iterator):
            x, y = out[0]["data"], out[0]["label"].squeeze(-1).long()
            if self.channels_last:
                x = x.permute(0, 3, 1, 2)  # NHWC memory seen as NCHW: a channels_last tensor, no copy
            yield x, y
            if step + 1 == steps:  # before the next batch is taken: none is drawn and lost
                break

    def train(self, epoch, steps):
        d, epochs = self.cfg["data"], self.cfg["train"]["epochs"]
        side = side_of_epoch(d, epoch)
        later = {side_of_epoch(d, e) for e in range(epoch, epochs)}
        for old in [s for s in self.pipes if s not in later]:
            del self.pipes[old]
        if side not in self.pipes:
            self.pipes[side] = self.build(self.train_pipeline, side)
        iterator = self.pipes[side][1]
        # A whole epoch runs the iterator to its end (where it resets itself). Fewer steps (train.max_steps_per_epoch)
        # leave it inside its epoch: the next epoch goes on from there and into its next one (DALI resets only at an
        # epoch's end).
        got = empty = 0
        while got < steps and empty < 2:
            left = steps - got
            n = 0
            for batch in self.batches(iterator, left if left < self.steps_per_epoch else None):
                n += 1
                yield batch
            got, empty = got + n, (empty + 1 if n == 0 else 0)

    def val(self):
        yield from self.batches(self.val_iter)


LOADERS = {"dataloader": DataLoaderData, "dali": DaliData}

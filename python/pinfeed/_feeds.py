"""The feeds of `python -m pinfeed.compare` (its docstring says what each one is): FEEDS, name -> (what it is,
factory(ctx) -> endless iterator of device-ready batches), and the Context they share. Only torch is imported at the
top (torchvision and pinfeed when a feed first needs them): compare.py loads this file beside it where the module is
not built."""
import torch

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Skipped(Exception):
    """A feed that cannot run here; the message says why."""


# --- the feeds: name -> (what it is, factory(ctx) -> endless iterator of device-ready batches) ----------------------


def _endless(loader, set_epoch=None):
    epoch = 0
    while True:
        if set_epoch is not None:
            set_epoch(epoch)
        yield from loader
        epoch += 1


def _needs_cuda(ctx, what):
    if not ctx.cuda:
        raise Skipped(f"{what} needs CUDA")


def dataloader_feed(ctx):
    loader = ctx.dataloader(pin_memory=False)

    def batches():
        for images, labels in _endless(loader):
            yield ctx.prepare(images.to(ctx.device)), labels.to(ctx.device)
    return batches()


def pinned_feed(ctx):
    _needs_cuda(ctx, "pinned memory with non_blocking copies")
    loader = ctx.dataloader(pin_memory=True)

    def batches():
        for images, labels in _endless(loader):
            yield ctx.prepare(images.to(ctx.device, non_blocking=True)), labels.to(ctx.device, non_blocking=True)
    return batches()


def dual_stream_feed(ctx):
    _needs_cuda(ctx, "a side copy stream")
    return dual_stream(_endless(ctx.dataloader(pin_memory=True)), ctx.device, ctx.prepare)


def dual_stream(host_batches, device, prepare):
    """Batch k+1 copied (from pinned memory) and prepared on a side stream while step k runs. At hand-out the
    consumer's current stream waits for the side stream's work so far (the batch's copy), and the batch's tensors are
    marked with record_stream for it: the caching allocator reuses their memory only after the consumer's stream
    has passed the work queued on it until they are freed. The next batch's copy is queued after that wait, so that
    it overlaps the step."""
    side = torch.cuda.Stream(device)

    def issue(batch):
        images, labels = batch
        with torch.cuda.stream(side):
            return prepare(images.to(device, non_blocking=True)), labels.to(device, non_blocking=True)

    try:
        pending = issue(next(host_batches))
    except StopIteration:
        return
    while True:
        compute = torch.cuda.current_stream(device)
        compute.wait_stream(side)
        for t in pending:
            t.record_stream(compute)
        ready = pending
        try:
            pending = issue(next(host_batches))
        except StopIteration:
            yield ready
            return
        yield ready


def _pinfeed_feed(ctx, decoder):
    if decoder == "nvjpeg":
        _needs_cuda(ctx, "nvJPEG")
    pinfeed = ctx.pinfeed()
    try:
        loader = pinfeed.ImageFolderLoader(ctx.args.root, ctx.args.batch_size, ctx.args.image_size, train=True,
                                           decoder=decoder, threads=max(1, ctx.args.workers), device=ctx.device,
                                           dtype=ctx.input_dtype, channels_last=ctx.args.channels_last,
                                           drop_last=True)
    except (ValueError, RuntimeError) as e:  # nvJPEG not built in, CUDA not usable
        raise Skipped(str(e)) from None
    if loader.decoder != decoder:
        raise Skipped(f"pinfeed's loader decodes with {loader.decoder}, not {decoder}")
    ctx.closers.append(loader.close)
    return _endless(loader, loader.set_epoch)


def resident_feed(ctx):
    batch = ctx.resident()

    def batches():
        while True:
            yield batch
    return batches()


FEEDS = {
    "dataloader": ("DataLoader, pageable memory, .to(device)", dataloader_feed),
    "pinned": ("DataLoader pin_memory=True, .to(device, non_blocking=True)", pinned_feed),
    "dual_stream": ("pinned DataLoader, the next batch copied on a side stream", dual_stream_feed),
    "pinfeed_cpu": ('pinfeed.ImageFolderLoader(decoder="cpu")', lambda ctx: _pinfeed_feed(ctx, "cpu")),
    "pinfeed_nvjpeg": ('pinfeed.ImageFolderLoader(decoder="nvjpeg")', lambda ctx: _pinfeed_feed(ctx, "nvjpeg")),
    "resident": ("one batch kept on the device: the ceiling", resident_feed),
    "resident_unwatched": ("the resident batch without pinfeed.watch: what the wrapper costs", resident_feed),
}


class Context:
    """What the feeds share: the options, the device, the input's dtype and memory format, the dataset."""

    def __init__(self, args, device):
        self.args, self.device = args, device
        self.cuda = device.type == "cuda"
        # fp16 on CUDA: the batch comes as float16 (pinfeed's loader makes it so); else float32. bf16 autocast
        # casts inside the model, as from float32.
        self.input_dtype = torch.float16 if self.cuda and args.precision == "fp16" else torch.float32
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.closers = []  # a row's loaders to close after it
        self._dataset = self._resident = None
        self._pinfeed = None

    def dataset(self):
        if self._dataset is None:
            import torchvision
            from torchvision import transforms
            tf = transforms.Compose([transforms.RandomResizedCrop(self.args.image_size),
                                     transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                     transforms.Normalize(MEAN, STD)])
            self._dataset = torchvision.datasets.ImageFolder(self.args.root, tf)
        return self._dataset

    def dataloader(self, pin_memory):
        workers = self.args.workers
        loader = torch.utils.data.DataLoader(self.dataset(), batch_size=self.args.batch_size, shuffle=True,
                                             drop_last=True, num_workers=workers, pin_memory=pin_memory,
                                             persistent_workers=workers > 0)
        return loader

    def prepare(self, images):
        """The batch as the model takes it: the input dtype and memory format, on the device it is on."""
        return images.to(dtype=self.input_dtype, memory_format=self.memory_format)

    def resident(self):
        """One batch of the dataset's first samples, on the device, prepared."""
        if self._resident is None:
            ds = self.dataset()
            samples = [ds[i] for i in range(self.args.batch_size)]
            images = torch.stack([s[0] for s in samples]).to(self.device)
            labels = torch.tensor([s[1] for s in samples], dtype=torch.int64, device=self.device)
            self._resident = (self.prepare(images), labels)
        return self._resident

    def pinfeed(self):
        if self._pinfeed is None:
            try:
                import pinfeed
                pinfeed.ImageFolderLoader  # noqa: B018 (a package without the built module has none)
            except (ImportError, AttributeError) as e:
                self._pinfeed = Skipped(f"pinfeed's compiled module is not importable ({e}): build it with "
                                        f"`pip install --no-build-isolation .`")
            else:
                self._pinfeed = pinfeed
        if isinstance(self._pinfeed, Skipped):
            raise self._pinfeed
        return self._pinfeed

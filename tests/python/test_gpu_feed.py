"""pinfeed's Python module on CUDA (ctest label gpu; every test skips without a GPU): the stream contract under a
slow consumer, on the default stream and on a stream of the caller's, with the CPU and the nvJPEG decoder; and the
CUDA path's pixels against the CPU path's."""
import os
import signal
import threading

import pytest
import torch

import pinfeed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

SLEEP_CYCLES = 50_000_000  # tens of milliseconds of GPU time queued ahead of each use of a batch: a slow consumer


DECODERS = ["cpu", pytest.param("nvjpeg", marks=pytest.mark.skipif(
    bool(pinfeed._C.nvjpeg_unavailable_reason()), reason="nvJPEG unavailable"))]


def gpu_loader(root, decoder, **kw):
    return pinfeed.ImageFolderLoader(root, 4, 32, device="cuda", decoder=decoder, dtype=torch.float16, threads=2,
                                     seed=11, prefetch_batches=1, **kw)


def checksum(images, labels):
    """On the current stream, queued behind whatever runs there: (sum of pixels, weighted sum, sum of labels)."""
    flat = images.reshape(images.shape[0], -1).double()
    weights = torch.arange(flat.shape[1], device=flat.device, dtype=torch.float64) % 89
    return torch.stack([flat.sum(), (flat * weights).sum(), labels.double().sum()])


def reference(root, decoder, epochs):
    """Each batch's checksum with the host waiting for the GPU after every batch: nothing can overlap."""
    loader, sums = gpu_loader(root, decoder), []
    for _ in range(epochs):
        for x, y in loader:
            torch.cuda.synchronize()
            sums.append(checksum(x, y).cpu())
    return torch.stack(sums)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("own_stream", [False, True])
def test_a_slow_consumer_sees_every_batch_as_the_reference_run(dataset, decoder, own_stream):
    epochs = 3
    expected = reference(dataset / "train", decoder, epochs)
    loader = gpu_loader(dataset / "train", decoder)
    stream = torch.cuda.Stream() if own_stream else torch.cuda.current_stream()
    early, late, held = [], [], []
    with torch.cuda.stream(stream):
        for _ in range(epochs):
            for x, y in loader:
                # Each batch is used only behind a long kernel on the consumer's stream, and again two batches
                # later, once the loader has reused its host slots and allocated new device memory twice: a batch
                # handed out before its copy ended, or memory reused while still queued for, shows as a checksum
                # that differs from the reference run's.
                torch.cuda._sleep(SLEEP_CYCLES)
                early.append(checksum(x, y))
                held.append((x, y))
                if len(held) > 2:
                    torch.cuda._sleep(SLEEP_CYCLES // 4)
                    late.append(checksum(*held.pop(0)))
        late += [checksum(x, y) for x, y in held]
    torch.cuda.synchronize()
    assert torch.equal(torch.stack(early).cpu(), expected)
    assert torch.equal(torch.stack(late).cpu(), expected)

def test_cuda_uint8_batches_are_the_cpu_paths_pixels(dataset):
    def batches(device):
        loader = pinfeed.ImageFolderLoader(dataset / "train", 4, 32, device=device, decoder="cpu",
                                           dtype=torch.uint8, threads=2, seed=5)
        return [(x.cpu(), y.cpu()) for x, y in loader]
    for (gx, gy), (cx, cy) in zip(batches("cuda"), batches("cpu")):
        assert torch.equal(gx, cx) and torch.equal(gy, cy)


@pytest.mark.parametrize("decoder", DECODERS)
def test_float_batches_are_normalised_on_the_device_in_the_asked_layout(dataset, decoder):
    loader = pinfeed.ImageFolderLoader(dataset / "train", 4, 32, device="cuda", decoder=decoder,
                                       dtype=torch.float32, channels_last=True, threads=2)
    x, y = next(iter(loader))
    assert x.is_cuda and y.is_cuda and x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.is_contiguous(memory_format=torch.channels_last) and x.shape == (4, 3, 32, 32)
    assert loader.decoder == decoder
    assert -3 < x.min().item() < x.max().item() < 3  # normalised, not 0-255 pixels


def test_state_dict_resumes_at_the_exact_batch_on_cuda(dataset):
    whole = gpu_loader(dataset / "train", "cpu")
    expected = [checksum(x, y) for _ in range(2) for x, y in whole]  # epochs 0 and 1
    first = gpu_loader(dataset / "train", "cpu")
    it = iter(first)
    for _ in range(3):
        next(it)
    resumed = gpu_loader(dataset / "train", "cpu")
    resumed.load_state_dict(first.state_dict())
    got = [checksum(x, y) for _ in range(2) for x, y in resumed]
    assert torch.equal(torch.stack(got).cpu(), torch.stack(expected[3:]).cpu())


@pytest.mark.parametrize("stop", ["ctrl_c", "stuck"])
def test_ctrl_c_or_a_stuck_file_ends_the_wait_and_the_pass_resumes_on_cuda(dataset, stop):
    # dual_stream: the wait is on the copier thread's queue, and the copier's own epoch ends with the error
    loader = gpu_loader(dataset / "train", "cpu", shuffle=False, _stall_sample=0,
                        sample_timeout_s=0 if stop == "ctrl_c" else 0.3)
    it = iter(loader)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    if stop == "ctrl_c":
        timer.start()
    with pytest.raises(KeyboardInterrupt if stop == "ctrl_c" else pinfeed.StuckSampleError):
        next(it)
    if stop == "ctrl_c":
        timer.join()
    loader._release_stall()
    assert len(list(it)) == len(loader)

"""pinfeed's Python module on the CPU (CPU decode, CPU tensors): its batches against the C++ loader's, resuming
from state_dict, ranks, bad files, a stuck file and Ctrl-C. ctest runs it (label cpu) with PYTHONPATH on the
build's python/ folder."""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import pinfeed
from conftest import CLASSES, PER_CLASS, reference_exe

SAMPLES = CLASSES * PER_CLASS


def loader(root, batch_size=5, image_size=32, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("decoder", "cpu")
    kw.setdefault("threads", 2)
    kw.setdefault("channels_last", False)
    return pinfeed.ImageFolderLoader(root, batch_size, image_size, **kw)


def reference_batches(split, batch, side, seed, epoch, train, fmt, count, out):
    """The C++ data::Loader's batches for these options: [(images, labels)], images as it lays them out."""
    subprocess.run([reference_exe(), "dump", str(split), str(batch), str(side), str(seed), str(epoch),
                    "1" if train else "0", fmt, str(count), str(out)], check=True)
    data = open(out, "rb").read()
    dtype, per_image = (torch.float32, (3, side, side)) if fmt == "float32" else (torch.uint8, (side, side, 3))
    image_bytes = torch.Size(per_image).numel() * dtype.itemsize
    batches, offset = [], 0
    while offset < len(data):
        n = min(batch, (len(data) - offset) // (image_bytes + 8))
        images = torch.frombuffer(bytearray(data[offset:offset + n * image_bytes]), dtype=dtype).view(n, *per_image)
        offset += n * image_bytes
        labels = torch.frombuffer(bytearray(data[offset:offset + n * 8]), dtype=torch.int64)
        offset += n * 8
        batches.append((images, labels))
    return batches


def sample_keys(images):
    """One key per image of a batch (its pixels' sum and a weighted sum): tells the samples apart."""
    flat = images.reshape(images.shape[0], -1).double()
    weights = torch.arange(flat.shape[1], dtype=torch.float64) % 97
    return [(round(a, 3), round(b, 3)) for a, b in zip(flat.sum(1).tolist(), (flat * weights).sum(1).tolist())]


def test_training_batches_equal_the_cpp_loaders_for_the_same_seed_and_epoch(dataset, tmp_path):
    ref = reference_batches(dataset / "train", 5, 32, 7, 1, True, "float32", 100, tmp_path / "ref.bin")
    feed = loader(dataset / "train", seed=7)
    feed.set_epoch(1)
    got = list(feed)
    assert len(got) == len(ref) == len(feed) == SAMPLES // 5
    for (images, labels), (ref_images, ref_labels) in zip(got, ref):
        assert images.dtype == torch.float32 and images.shape == (5, 3, 32, 32)
        assert torch.equal(labels, ref_labels)
        assert torch.equal(images, ref_images)
    other_seed = next(iter(loader(dataset / "train", seed=8)))[0]
    assert not torch.equal(other_seed, got[0][0])


def test_validation_uint8_batches_are_the_cpp_loaders_pixels(dataset, tmp_path):
    ref = reference_batches(dataset / "train", 5, 40, 0, 0, False, "uint8", 100, tmp_path / "ref.bin")
    feed = loader(dataset / "train", image_size=40, train=False, dtype=torch.uint8, channels_last=True)
    got = list(feed)
    assert len(got) == len(ref) == len(feed) == -(-SAMPLES // 5)  # every sample, the last batch short
    for (images, labels), (ref_images, ref_labels) in zip(got, ref):
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(images.permute(0, 2, 3, 1), ref_images)
        assert torch.equal(labels, ref_labels)


def test_float16_channels_last_batches_hold_the_float32_values(dataset):
    half = next(iter(loader(dataset / "train", dtype=torch.float16, channels_last=True)))[0]
    full = next(iter(loader(dataset / "train")))[0]
    assert half.dtype == torch.float16 and half.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(half.float(), full, atol=2e-2, rtol=0)


def test_batches_stay_the_callers_after_the_loader_moves_on(dataset):
    feed = loader(dataset / "train", prefetch_batches=1)
    kept = [(x, x.clone()) for x, _ in feed]  # the ring has 3 slots: the fourth batch reuses the first's
    assert all(torch.equal(x, copy) for x, copy in kept)


def test_state_dict_resumes_at_the_exact_batch_across_an_epoch_end(dataset):
    whole = loader(dataset / "train", seed=3)
    expected = [b for _ in range(2) for b in whole]  # epochs 0 and 1
    first = loader(dataset / "train", seed=3)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 2)
    resumed = loader(dataset / "train", seed=3)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # the usual loop's call keeps the saved position
    got = list(resumed) + list(resumed)  # the rest of epoch 0, then epoch 1
    assert len(got) == len(expected) - 2
    for (x, y), (ex, ey) in zip(got, expected[2:]):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    assert resumed.state_dict()["epoch"] == 2
    with pytest.raises(ValueError, match="seed"):
        loader(dataset / "train", seed=4).load_state_dict(state)


def test_set_epoch_draws_another_order_and_repeats_its_own(dataset):
    feed = loader(dataset / "train")
    labels = lambda e: (feed.set_epoch(e), torch.cat([y for _, y in feed]))[1]  # noqa: E731
    zero, one = labels(0), labels(1)
    assert not torch.equal(zero, one)
    assert torch.equal(labels(0), zero)


@pytest.mark.parametrize("drop_last", [True, False])
def test_two_ranks_share_each_global_batch_of_one_rank(dataset, drop_last):
    def keys(rank, world, batch):
        feed = loader(dataset / "train", batch_size=batch, train=False, shuffle=True, seed=5, drop_last=drop_last,
                      rank=rank, world_size=world)
        return len(feed), [sample_keys(x) for x, _ in feed]
    n0, rank0 = keys(0, 2, 4)
    n1, rank1 = keys(1, 2, 4)
    _, single = keys(0, 1, 8)
    if drop_last:
        assert n0 == n1 == len(rank0) == len(rank1) == SAMPLES // 8
    for step, batch in enumerate(single):  # global batch = rank 0's batch, then rank 1's
        assert (rank0[step] if step < len(rank0) else []) + (rank1[step] if step < len(rank1) else []) == batch
    seen = sorted(k for b in rank0 + rank1 for k in b)
    assert len(seen) == (SAMPLES // 8 * 8 if drop_last else SAMPLES) and len(set(seen)) == len(seen)


def test_bad_files_are_skipped_and_named(copy_of):
    root = copy_of()
    cls = sorted(os.listdir(root))[0]
    truncated, junk = root / cls / sorted(os.listdir(root / cls))[0], root / cls / "junk.jpg"
    truncated.write_bytes(truncated.read_bytes()[:300])
    junk.write_bytes(b"not an image")
    feed = loader(root, train=False, drop_last=False)
    got = [y for _, y in feed]
    assert sum(len(y) for y in got) == SAMPLES + 1  # each bad file replaced by another sample
    bad = dict(feed.bad_images)
    assert set(bad) == {str(truncated), str(junk)}
    assert all(reason for reason in bad.values())


def test_fail_policy_raises_a_data_error_naming_the_file_each_time_its_batch_is_asked(copy_of):
    root = copy_of()
    cls = sorted(os.listdir(root))[0]
    junk = root / cls / "junk.jpg"
    junk.write_bytes(b"not an image")
    it = iter(loader(root, train=False, on_bad_image="fail"))
    with pytest.raises(pinfeed.DataError, match="junk.jpg"):
        list(it)
    with pytest.raises(pinfeed.DataError, match="junk.jpg"):
        next(it)  # the batch that was not delivered is tried again, not skipped


def test_a_stuck_file_raises_stuck_sample_error_then_the_pass_resumes(dataset):
    feed = loader(dataset / "train", shuffle=False, sample_timeout_s=0.3, _stall_sample=0)
    first = sorted(os.listdir(dataset / "train" / feed.classes[0]))[0]
    it = iter(feed)
    with pytest.raises(pinfeed.StuckSampleError, match=first):
        next(it)
    feed._release_stall()
    assert len(list(it)) == len(feed)  # resumed at the batch that was not delivered


def test_ctrl_c_raises_keyboard_interrupt_while_a_worker_is_stuck(dataset):
    feed = loader(dataset / "train", shuffle=False, sample_timeout_s=0, _stall_sample=0)
    it = iter(feed)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert time.monotonic() - t0 < 30  # not a bound on speed: the wait ended by itself, nothing killed it
    timer.join()
    feed._release_stall()
    assert len(list(it)) == len(feed)


def test_options_that_cannot_run_say_why(dataset):
    with pytest.raises(ValueError, match="CUDA device"):
        loader(dataset / "train", decoder="nvjpeg")
    with pytest.raises(ValueError, match="dtype"):
        loader(dataset / "train", dtype=torch.float64)
    with pytest.raises(FileNotFoundError):
        loader(dataset / "missing")
    with pytest.raises(pinfeed.DataError, match="fewer than one batch"):
        loader(dataset / "train", batch_size=SAMPLES + 1)


@pytest.mark.parametrize("given", [None, "4"])
def test_import_asks_cuda_for_32_hardware_queues_unless_the_caller_chose(given):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    if given:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = given
    code = "import os, torch, pinfeed; print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'), torch.version.cuda)"
    got, cuda = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                               text=True).stdout.split()
    assert got == (given or ("32" if cuda != "None" else "None"))


def test_a_new_loop_after_ctrl_c_in_a_wait_yields_the_rest_of_the_epoch(dataset):
    expected = list(loader(dataset / "train", shuffle=False))
    # batch 2's first sample held as a stuck read would be: Ctrl-C comes while that batch is awaited
    feed = loader(dataset / "train", shuffle=False, sample_timeout_s=0, _stall_sample=10)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    got = []
    with pytest.raises(KeyboardInterrupt):
        for x, y in feed:
            got.append((x, y))
            if len(got) == 2:
                timer.start()
    timer.join()
    feed._release_stall()
    assert len(got) == 2
    got += [(x, y) for x, y in feed]  # a new loop, not the interrupted iterator
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(y, ey) and torch.equal(x, ex)


@pytest.mark.parametrize("stop", ["ctrl_c_in_the_body", "break"])
def test_a_new_loop_after_a_pass_left_midway_continues_at_its_first_undelivered_batch(dataset, stop):
    whole = loader(dataset / "train", seed=9)
    expected = [b for _ in range(2) for b in whole]  # epochs 0 and 1, uninterrupted
    feed = loader(dataset / "train", seed=9)
    got = []
    with contextlib.suppress(KeyboardInterrupt):
        for x, y in feed:
            got.append((x, y))
            if len(got) == 2:
                if stop == "break":
                    break
                raise KeyboardInterrupt  # Ctrl-C while the loop's body runs
    assert feed.state_dict()["batch"] == 2
    got += list(feed)  # the rest of epoch 0
    assert len(got) == len(feed)
    got += list(feed)  # epoch 1, a new pass: the last one ended
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(y, ey) and torch.equal(x, ex)


def test_set_epoch_to_another_epoch_drops_a_pass_left_midway(dataset):
    expected = loader(dataset / "train", seed=9)
    expected.set_epoch(1)
    expected = list(expected)
    feed = loader(dataset / "train", seed=9)
    next(iter(feed))
    feed.set_epoch(1)
    got = list(feed)
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(y, ey) and torch.equal(x, ex)


# Arguments the loader must refuse, each with the exception naming it. Built in a child whose address space is
# capped 2 GiB above what importing took, so that one which allocates on (a ring of 10^9 batches, 10^6 threads)
# fails there instead of taking the machine's memory.
HOSTILE = {
    "prefetch_batches=10**9": ("prefetch_batches", ValueError),
    "prefetch_batches=0": ("prefetch_batches", ValueError),
    "prefetch_batches=4.0": ("prefetch_batches", TypeError),
    "image_size=2**31 - 1": ("image_size", ValueError),
    "image_size=2**30": ("image_size", ValueError),
    "image_size=8": ("image_size", ValueError),
    "image_size=[32, 2**30]": ("image_size[1]", ValueError),
    "image_size=[32, 64], train=False": ("image_size", ValueError),
    "image_size='32'": ("image_size", TypeError),
    "batch_size=10**9": ("batch_size", ValueError),
    "batch_size=8.5": ("batch_size", TypeError),
    "batch_size='8'": ("batch_size", TypeError),
    "batch_size=True": ("batch_size", TypeError),
    "threads=10**6": ("threads", ValueError),
    "threads=0": ("threads", ValueError),
    "std=(0, 0, 0)": ("std", ValueError),
    "std=(0.2, 0.2)": ("std", ValueError),
    "std=0.2": ("std", TypeError),
    "mean=(0.5, float('nan'), 0.5)": ("mean[1]", ValueError),
    "mean=(0.5, '0.5', 0.5)": ("mean[1]", TypeError),
    "scale=(2.0, 0.5)": ("scale", ValueError),
    "scale=(0.5, 0.2)": ("scale", ValueError),
    "scale=(0.0, 1.0)": ("scale", ValueError),
    "ratio=(-1, 0)": ("ratio", ValueError),
    "ratio=(2.0, 1.0)": ("ratio", ValueError),
    "ratio=(0.5, float('inf'))": ("ratio[1]", ValueError),
    "val_resize_ratio=0": ("val_resize_ratio", ValueError),
    "val_resize_ratio=1.5": ("val_resize_ratio", ValueError),
    "sample_timeout_s=-1": ("sample_timeout_s", ValueError),
    "sample_timeout_s=float('nan')": ("sample_timeout_s", ValueError),
    "nvjpeg_share=2": ("nvjpeg_share", ValueError),
    "seed=-1": ("seed", ValueError),
    "seed=1.0": ("seed", TypeError),
    "max_image_pixels=-1": ("max_image_pixels", ValueError),
    "max_file_mb=2**40": ("max_file_mb", ValueError),
    "max_file_mb=0.5": ("max_file_mb", TypeError),
    "hflip='no'": ("hflip", TypeError),
    "shuffle=1": ("shuffle", TypeError),
    "train=None": ("train", TypeError),
    "rank=2, world_size=2": ("rank", ValueError),
    "rank=0, world_size=0": ("world_size", ValueError),
    "decoder=1": ("decoder", TypeError),
    "on_bad_image=None": ("on_bad_image", TypeError),
    "classes='abc'": ("classes", TypeError),
    # each within its bounds, together a host ring (1026 batches of 2^20 images of 4096 px) over half the memory
    "batch_size=2**20, image_size=4096, prefetch_batches=1024": ("the host batch ring", ValueError),
}


@pytest.fixture(scope="module")
def hostile_outcomes(dataset):
    """{case: [exception type, message]} from one child process under a capped address space."""
    code = textwrap.dedent("""
        import json, resource, sys
        import pinfeed
        root, cases = sys.argv[1], json.loads(sys.argv[2])
        vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
        out, kw = {}, dict(batch_size=5, image_size=32, device="cpu", decoder="cpu", threads=2)
        for case in cases:
            try:
                pinfeed.ImageFolderLoader(root, **dict(kw, **eval(f"dict({case})")))
                out[case] = [None, "accepted"]
            except BaseException as e:
                out[case] = [type(e).__name__, str(e)]
        x, _ = next(iter(pinfeed.ImageFolderLoader(root, **kw)))  # the cap leaves room for a loader that runs
        out["control"] = list(x.shape)
        print(json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_WORLD_SIZE"}
    run = subprocess.run([sys.executable, "-c", code, str(dataset / "train"), json.dumps(list(HOSTILE))], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    outcomes = json.loads(run.stdout.splitlines()[-1])
    assert outcomes.pop("control") == [5, 3, 32, 32]
    return outcomes


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_argument_raises_naming_it_before_allocating(hostile_outcomes, case):
    name, error = HOSTILE[case]
    kind, message = hostile_outcomes[case]
    assert kind == error.__name__, message
    assert re.match(re.escape(f"pinfeed.ImageFolderLoader: {name}"), message), message


def test_the_host_ring_check_names_the_arguments_to_lower(hostile_outcomes):
    _, message = hostile_outcomes["batch_size=2**20, image_size=4096, prefetch_batches=1024"]
    assert "half of this machine's" in message
    assert all(a in message for a in ("prefetch_batches 1024", "batch_size 1048576", "image_size 4096"))


@pytest.mark.parametrize("change, field, error", [
    ({"epoch": -1}, "epoch", ValueError),
    ({"epoch": 1.5}, "epoch", TypeError),
    ({"batch": -1}, "batch", ValueError),
    ({"batch": 10**6}, "batch", ValueError),
    ({"seed": "0"}, "seed", TypeError),
    ({"batch_size": True}, "batch_size", TypeError),
    ({"shuffle": 1}, "shuffle", TypeError),
    ({"epoch": None}, "epoch", TypeError),
    ({"dataset_size": 7}, "dataset_size", ValueError),
])
def test_load_state_dict_refuses_a_bad_field_naming_it(dataset, change, field, error):
    feed = loader(dataset / "train")
    state = {**feed.state_dict(), **change}
    with pytest.raises(error, match=re.escape("pinfeed.ImageFolderLoader.load_state_dict: ") + r".*\b" + field):
        feed.load_state_dict(state)
    with pytest.raises(ValueError, match="has no 'batch'"):
        feed.load_state_dict({"epoch": 0})
    with pytest.raises(TypeError, match="state must be a dict"):
        feed.load_state_dict([("epoch", 0)])
    assert feed.state_dict() == loader(dataset / "train").state_dict()  # nothing taken from a refused state


@pytest.mark.parametrize("epoch, error", [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (10**12, ValueError)])
def test_set_epoch_refuses_an_epoch_out_of_bounds_or_not_an_int(dataset, epoch, error):
    feed = loader(dataset / "train")
    with pytest.raises(error, match=r"pinfeed\.ImageFolderLoader\.set_epoch: epoch"):
        feed.set_epoch(epoch)


def test_training_augmentations_give_soft_targets_and_validation_refuses_them(dataset):
    mixed = loader(dataset / "train", auto_augment="trivial", random_erasing=0.5, mixup_alpha=0.2, cutmix_alpha=1.0,
                   label_smoothing=0.1)
    images, labels = next(iter(mixed))
    assert labels.shape == (images.shape[0], len(mixed.classes)) and labels.dtype == torch.float32
    assert torch.allclose(labels.sum(1), torch.ones(images.shape[0]))  # probabilities, smoothing folded in
    assert labels.min() > 0  # label smoothing reaches every class
    with pytest.raises(ValueError, match="validation batches"):
        loader(dataset / "val", train=False, mixup_alpha=0.2)
    with pytest.raises(ValueError, match="auto_augment"):
        loader(dataset / "train", auto_augment="sometimes")
    with pytest.raises(ValueError, match="label_smoothing"):
        loader(dataset / "train", label_smoothing=0.1)
    with pytest.raises(ValueError, match="mixup_alpha"):
        loader(dataset / "train", mixup_alpha=1000.0)
    with pytest.raises(ValueError, match="augment_fill"):
        loader(dataset / "train", auto_augment="trivial", augment_fill=(0, 0, 300))

"""pinfeed.watch and python -m pinfeed.compare on the CPU: the host's wait around slow and fast iterables, the records,
their JSON lines and the printed lines, the pass-through to the loader, the GPU idle accounting on a simulated
stream, and the comparison table on a small generated ImageFolder. ctest runs it (label cpu) with PYTHONPATH on the
build's python/ folder; where pinfeed's compiled module is not importable the modules are loaded from
python/pinfeed/ as plain files (both import only torch, torchvision and the standard library), and compare's
pinfeed rows are skipped."""
import importlib
import importlib.util
import json
import pathlib
import re
import time
import types

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "pinfeed"


def _built():
    try:
        import pinfeed
        return pinfeed if hasattr(pinfeed, "ImageFolderLoader") else None
    except ImportError:
        return None


def _module(name):
    """pinfeed.<name> of the built package where `import pinfeed` works, else python/pinfeed/<name>.py as a file."""
    if _built() is not None:
        try:
            return importlib.import_module(f"pinfeed.{name}")
        except ImportError:  # a package built before the module existed
            pass
    spec = importlib.util.spec_from_file_location(f"pinfeed_{name}_as_file", PACKAGE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


watch_module = _module("watch")
compare = _module("compare")


def test_the_package_exports_watch_beside_its_loader():
    pinfeed = _built()
    if pinfeed is None:
        pytest.skip("pinfeed's compiled module is not importable: the package's __init__ is not run")
    assert pinfeed.watch is watch_module.watch and pinfeed.Watch is watch_module.Watch
    assert {"watch", "Watch", "ImageFolderLoader"} <= set(pinfeed.__all__)


class Batches:
    """n batches of (images (4, 3, 8, 8), labels (4,)), `delay` seconds before each; len, set_epoch, state_dict and
    a plain attribute, as a loader has them."""

    def __init__(self, n, delay=0.0, batch=4):
        self.n, self.delay, self.batch = n, delay, batch
        self.epochs_set, self.dataset = [], "the dataset"
        self.images = torch.zeros(batch, 3, 8, 8)
        self.labels = torch.zeros(batch, dtype=torch.int64)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            if self.delay:
                time.sleep(self.delay)
            yield self.images, self.labels

    def set_epoch(self, epoch):
        self.epochs_set.append(epoch)

    def state_dict(self):
        return {"epoch": len(self.epochs_set)}


def quiet(loader, **kw):
    lines = []
    return watch_module.watch(loader, log=lines.append, **kw), lines


def test_a_slow_iterables_wait_is_its_delay_and_a_fast_ones_about_zero():
    slow, _ = quiet(Batches(12, delay=0.02), warmup_steps=2)
    for _ in slow:
        pass
    fast, _ = quiet(Batches(12), warmup_steps=2)
    for _ in fast:
        pass
    s, f = slow.records[0], fast.records[0]
    assert 15 <= s["wait_ms_p50"] <= 60 and s["wait_ms_p95"] >= s["wait_ms_p50"]
    assert f["wait_ms_p50"] < 2
    assert s["steps"] == f["steps"] == 10 and s["warmup_steps"] == 2 and s["samples"] == 40
    assert s["samples_per_s"] < f["samples_per_s"]


def test_records_have_the_documented_fields_and_the_json_lines_equal_them(tmp_path):
    path = tmp_path / "watch.jsonl"
    w, lines = quiet(Batches(6), warmup_steps=1, jsonl=path, epoch=3, name="train")
    for _ in range(2):
        for _ in w:
            pass
    assert [set(r) for r in w.records] == [set(watch_module.RECORD_FIELDS)] * 2
    assert [r["epoch"] for r in w.records] == [3, 4]
    r = w.records[0]
    assert (r["steps"], r["samples"], r["complete"], r["device"], r["name"]) == (5, 20, True, "cpu", "train")
    assert r["samples_per_s"] == pytest.approx(r["samples"] / r["seconds"])
    assert r["wait_ms_p50"] <= r["wait_ms_p95"] <= r["wait_ms_max"]
    assert [json.loads(line) for line in path.read_text().splitlines()] == w.records
    assert len(lines) == 2 and lines[0].startswith("train epoch 3: ") and "samples/s, wait p50 " in lines[0]
    assert "5 steps in " in lines[0] and "(+1 warm-up in " in lines[0]


def test_the_docs_table_lists_every_record_field():
    page = (REPO / "docs" / "python-module.md").read_text()
    section = page.split("## Is the GPU waiting? `pinfeed.watch`")[1].split("\n## ")[0]
    documented = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            documented.update(re.findall(r"`([a-z0-9_]+)`", row.split("|")[1]))
    assert documented == set(watch_module.RECORD_FIELDS)


def test_the_line_goes_to_stderr_by_default_and_nowhere_with_log_none(capsys):
    for _ in watch_module.watch(Batches(3), warmup_steps=0):
        pass
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("epoch 0: ")
    w = watch_module.watch(Batches(3), log=None)
    for _ in w:
        pass
    assert capsys.readouterr() == ("", "") and len(w.records) == 1


def test_on_the_cpu_idle_is_not_measured():
    w, lines = quiet(Batches(4), warmup_steps=0)
    for _ in w:
        pass
    assert w.records[0]["gpu_idle"] is None and w.records[0]["gpu_idle_ms_mean"] is None
    assert "GPU idle n/a" in lines[0]


def test_len_set_epoch_state_dict_and_attributes_pass_through():
    loader = Batches(5)
    w, _ = quiet(loader)
    assert len(w) == 5 and bool(w) and w.wrapped is loader
    assert w.dataset == "the dataset" and w.state_dict() == {"epoch": 0}
    w.set_epoch(7)
    assert loader.epochs_set == [7]
    for _ in w:
        pass
    assert w.records[0]["epoch"] == 7
    with pytest.raises(AttributeError):
        w.no_such_attribute
    with pytest.raises(TypeError):
        len(watch_module.watch(iter(range(3)), log=None))


def test_a_pass_cut_short_is_reported_by_end_epoch_or_by_the_next_pass():
    w, lines = quiet(Batches(10), warmup_steps=1)
    for i, _ in enumerate(w):
        if i == 3:
            break
    r = w.end_epoch()
    assert r is w.records[0] and not r["complete"] and r["steps"] == 3 and "ended before" in lines[0]
    assert w.end_epoch() is None
    for i, _ in enumerate(w):
        if i == 5:
            break
    for _ in w:
        pass
    assert [(r["epoch"], r["steps"], r["complete"]) for r in w.records] == [(0, 3, False), (1, 5, False), (2, 9, True)]


def test_a_pass_within_warm_up_has_no_figures_and_batch_size_may_be_given():
    w, lines = quiet(Batches(2), warmup_steps=5)
    for _ in w:
        pass
    r = w.records[0]
    assert (r["steps"], r["warmup_steps"], r["samples_per_s"], r["wait_ms_p50"]) == (0, 2, None, None)
    w, _ = quiet([[1, 2], [3, 4]], warmup_steps=0)  # no tensor: samples unknown
    for _ in w:
        pass
    assert w.records[0]["samples"] is None and w.records[0]["steps_per_s"] is not None
    w, _ = quiet(Batches(3), warmup_steps=0, batch_size=lambda b: 2 * len(b[1]))
    for _ in w:
        pass
    assert w.records[0]["samples"] == 24
    with pytest.raises(ValueError):
        watch_module.watch(Batches(1), warmup_steps=-1)


class SimulatedStream:
    """One CUDA stream in milliseconds: work runs in the order queued, from when it is queued; an event completes when
    the stream reaches it. Stands in for torch.cuda's Event and current_stream, and a tensor that says it is on CUDA."""

    def __init__(self):
        self.host = 0.0      # the host's clock
        self.free_at = 0.0   # when the stream has run all it was given
        self.waits = 0       # Event.synchronize calls
        sim = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at = None

            def record(self, stream):
                self.at = max(sim.free_at, sim.host)

            def query(self):
                return sim.host >= self.at

            def synchronize(self):
                sim.waits += 1
                sim.host = max(sim.host, self.at)

            def elapsed_time(self, end):
                return end.at - self.at

        class Tensor:
            is_cuda = True
            device = torch.device("cuda", 0)
            shape = (4, 3, 8, 8)

            def dim(self):
                return 4

        self.Tensor = Tensor
        self.torch = types.SimpleNamespace(Tensor=Tensor, cuda=types.SimpleNamespace(
            Event=Event, current_stream=lambda device: None))

    def queue(self, ms, launch_ms=1.0):
        """The host queues `ms` of work on the stream, which takes it launch_ms."""
        self.free_at = max(self.free_at, self.host) + ms
        self.host += launch_ms


def simulated_epoch(monkeypatch, wait_ms, step_ms=10.0, steps=8, warmup_steps=2):
    sim = SimulatedStream()
    monkeypatch.setattr(watch_module, "torch", sim.torch)

    def batches():
        for _ in range(steps):
            sim.host += wait_ms  # the host waits for the batch
            yield sim.Tensor()
    w, _ = quiet(batches(), warmup_steps=warmup_steps)
    for _ in w:
        sim.queue(step_ms)
        assert sim.waits == 0  # nothing in the loop waits for the GPU
    return w.records[0], sim


def test_idle_is_the_streams_empty_time_between_steps(monkeypatch):
    # 10 ms of work launched in 1 ms, then a 15 ms wait: the stream runs dry 6 ms before each step.
    r, sim = simulated_epoch(monkeypatch, wait_ms=15)
    assert r["device"] == "cuda:0" and r["steps"] == 6
    assert r["gpu_idle_ms_mean"] == pytest.approx(6) and r["compute_ms_mean"] == pytest.approx(10)
    assert r["gpu_idle"] == pytest.approx(6 / 16)  # 6 gaps (the one after warm-up too) over 6 x 16 ms
    assert r["seconds"] == pytest.approx(6 * 16e-3) and r["samples_per_s"] == pytest.approx(24 / (6 * 16e-3))
    assert sim.waits > 0  # at the epoch's end


def test_a_wait_hidden_behind_queued_work_is_no_idle(monkeypatch):
    # A 5 ms wait while 9 ms of the step before are still queued: the stream never runs dry.
    r, _ = simulated_epoch(monkeypatch, wait_ms=5)
    assert r["gpu_idle"] == pytest.approx(0) and r["seconds"] == pytest.approx(6 * 10e-3)


def test_without_warm_up_the_window_starts_at_the_first_step(monkeypatch):
    r, _ = simulated_epoch(monkeypatch, wait_ms=15, warmup_steps=0)
    assert r["steps"] == 8 and r["gpu_idle"] == pytest.approx(7 * 6 / (7 * 6 + 8 * 10))


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """2 classes x 6 JPEGs of 40 x 48 random pixels."""
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for c in range(2):
        (root / f"class{c}").mkdir()
        for i in range(6):
            image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(root / f"class{c}" / f"{i}.jpg")
    return root


def test_compare_prints_the_table_with_every_feed_run_or_skipped_on_the_cpu(image_folder, tmp_path, capsys):
    pytest.importorskip("torchvision")
    out = tmp_path / "compare.json"
    code = compare.main(["--root", str(image_folder), "--device", "cpu", "--model", "resnet18", "--steps", "2",
                         "--warmup", "1", "--batch-size", "4", "--image-size", "32", "--workers", "1",
                         "--compile", "none", "--repeats", "2", "--json", str(out)])
    assert code == 0
    stdout = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in stdout.splitlines() if line.startswith("| ")}
    assert list(rows) == ["feed", "---", *compare.FEEDS]
    for feed in ("pinned", "dual_stream", "pinfeed_nvjpeg"):
        assert "skipped:" in rows[feed] and "CUDA" in rows[feed]
    ran = ["dataloader", "resident", "resident_unwatched"] + (["pinfeed_cpu"] if _built() is not None else [])
    if _built() is None:
        assert "skipped:" in rows["pinfeed_cpu"]
    for feed in ran:
        cells = [c.strip() for c in rows[feed].split("|")[2:-1]]
        assert cells[0].split()[1].startswith("[") and cells[3] == "n/a" and float(cells[5]) > 0
    assert "| 100.0% |" in rows["resident"]
    assert "pinfeed.watch's cost: " in stdout and "(resident against resident_unwatched)" in stdout
    data = json.loads(out.read_text())
    measured = {r["feed"]: r for r in data["rows"] if r["records"]}
    assert sorted(measured) == sorted(ran)
    assert all(len(r["records"]) == 2 and r["records"][0]["steps"] == 2 for r in measured.values())
    assert measured["dataloader"]["summary"]["cpu_ms_per_sample"] > 0


def test_pinfeeds_loader_reports_its_queues_and_any_other_loader_none(image_folder):
    pinfeed = _built()
    if pinfeed is None:
        pytest.skip("pinfeed's compiled module is not importable")
    loader = pinfeed.ImageFolderLoader(image_folder, 2, 32, threads=1, device="cpu")
    depth = loader.queue_depth()
    assert set(depth) == {"copied", "decoded", "loading"} and all(v >= 0 for v in depth.values())
    w = watch_module.watch(loader, warmup_steps=1, log=None)
    for _ in w:
        time.sleep(0.05)  # a slow step: the loader gets ahead
    r = w.records[0]
    assert r["queue_copied_mean"] == 0 and r["queue_copied_min"] == 0  # no copier on the CPU
    assert r["queue_decoded_mean"] > 0 and r["queue_decoded_min"] >= 0
    assert r["queue_loading_mean"] is not None
    other = watch_module.watch(Batches(3), warmup_steps=0, log=None)
    for _ in other:
        pass
    assert all(other.records[0][f"queue_{k}_{s}"] is None for k in watch_module.QUEUE_KEYS for s in ("mean", "min"))


def test_compare_refuses_an_unknown_feed_and_a_missing_folder(tmp_path):
    with pytest.raises(SystemExit) as e:
        compare.main(["--root", str(tmp_path), "--feeds", "dataloader,nope", "--device", "cpu"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        compare.main(["--root", str(tmp_path / "missing"), "--device", "cpu"])
    assert e.value.code == 2

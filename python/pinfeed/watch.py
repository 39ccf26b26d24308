"""Is the GPU waiting? The figures `pinfeed train` reports per epoch, for any PyTorch loop.

    import pinfeed
    for images, labels in pinfeed.watch(loader):   # any iterable of batches: DataLoader, DALI, a prefetcher
        ...                                        # the loop as it was
    # epoch 0: 6,512 samples/s, wait p50 0.03 ms p95 0.10 ms, GPU idle 1.2%, 195 steps in 7.7 s (+10 warm-up in 2.1 s)

Per step it measures the host's wait for the next batch (the time inside the wrapped iterator's `next()`) and, when
the batch is on CUDA, the compute stream's idle time between steps, from two CUDA events per step on the stream that
is current when the loop asks for a batch (torch.cuda.current_stream() of the batch's device):

    ... step k's work | E_k  [next() of batch k+1]  S_k+1 | step k+1's work | E_k+1 ...

- S_k+1 is recorded when next() has returned batch k+1: everything queued on the stream before it (step k, and
  whatever the feed queued in next(): a copy on this stream, a wait for a copy on another stream) comes first.
- E_k is recorded when the loop asks for batch k+1: the end of the work step k queued on the stream.
- idle before step k+1 = E_k -> S_k+1 on the GPU: the time the stream spent between the end of step k's work and
  the point where step k+1's first work was queued. It is the time the stream had nothing of the step to run: it
  sat empty while the host waited for the batch, or it ran what the feed itself queued on it (a synchronous copy),
  or it waited for an event of another stream (the batch's copy). When the host is ahead of the GPU, E_k and
  S_k+1 are queued while the GPU still runs earlier steps and the gap is about zero.
- busy of step k = S_k -> E_k: the step's own work on the stream, from its first kernel's queueing point to its
  last kernel's end, gaps between its kernels included.
- gpu_idle (per epoch) = sum of idle / GPU window, the GPU window being the sum of idle and busy over the timed
  steps: from the end of the last warm-up step (E_w-1; with warmup_steps=0 the first step's S_0) to the last
  timed step's end. samples/s on CUDA = the timed samples / that window.

What it cannot see: work the step queues on other streams (a side stream's compute; copies on a loader's own
stream), gaps between the kernels of one step (a step whose launches are slower than its kernels reads as busy:
a profiler trace shows those), and other processes on the same GPU. A loop that changes the current stream between
steps gets gaps measured across streams (clamped at zero). The events are read a few steps late, when query()
says they are done (a ring of pending steps); the only synchronisation is one wait for the last event when an
epoch ends, so that its figures are complete when the line is printed.

An epoch is one pass over the wrapped iterable: each iter() starts one, numbered from `epoch` (default 0) on, or
from the number set_epoch() gave. The first `warmup_steps` steps of each epoch are left out of the figures (their
host seconds are kept: warmup_seconds), as `pinfeed train` leaves out pipeline.warmup_steps (default 10 there and
here): the first steps carry worker start-up, torch.compile and cuDNN's autotuning. On the CPU, or when the batch is
not on CUDA, samples/s is over the host's wall time and gpu_idle is None ("GPU idle n/a").

Cost per step: two perf_counter() calls, and on CUDA two event records and a query or two; no synchronisation,
no .item(). The module imports only torch and the standard library.
"""
import json
import math
import os
import sys
import time
from collections import deque

import torch

__all__ = ["watch", "Watch", "RECORD_FIELDS", "format_line", "to_stderr"]

# Each epoch's record (Watch.records, one JSON line each in `jsonl`): field -> meaning. Names as in pinfeed train's
# metrics.jsonl where the figure is the same. docs/python-module.md shows this table.
RECORD_FIELDS = {
    "name": "the Watch's name= (None when not given)",
    "epoch": "the epoch's number",
    "complete": "true when the wrapped iterable ended the pass; false when end_epoch() or a new pass cut it short",
    "device": '"cuda:N" when the batches were on CUDA (idle measured on that device\'s current stream), else "cpu"',
    "steps": "timed steps (after warm-up)",
    "warmup_steps": "steps of the pass left out as warm-up (at most warmup_steps)",
    "warmup_seconds": "host seconds of the warm-up steps, their waits included",
    "samples": "timed samples: the first tensor's len per batch, or batch_size=; None when unknown",
    "seconds": "span of the timed steps: the GPU window on CUDA, the host's wall time otherwise",
    "host_seconds": "host wall time from the request of the first timed batch to the end of the last timed step",
    "samples_per_s": "samples / seconds (None without samples or timed steps)",
    "steps_per_s": "steps / seconds",
    "wait_ms_mean": "host time inside the wrapped iterator's next(), mean over the timed steps",
    "wait_ms_p50": "its median (linear interpolation between ranks, as numpy's default)",
    "wait_ms_p95": "its 95th percentile",
    "wait_ms_max": "its largest",
    "compute_ms_mean": "a step's span, mean: on CUDA S_k -> E_k on the stream; on the CPU host time from hand-out "
                       "to the next request",
    "gpu_idle": "fraction 0-1 of the GPU window the compute stream spent between steps (None: not measured)",
    "gpu_idle_ms_mean": "the idle between two steps, mean over the timed steps (None: not measured)",
    "queue_copied_mean": "pinfeed's ImageFolderLoader (queue_depth(), after each timed hand-out): batches on the "
                         "device already, mean (None for any other loader)",
    "queue_copied_min": "their least",
    "queue_decoded_mean": "batches decoded in the host ring, waiting, mean",
    "queue_decoded_min": "their least (0 with queue_copied_min 0: a batch was asked for before it was ready)",
    "queue_loading_mean": "batches opened whose samples are still loading, mean",
    "queue_loading_min": "their least",
}
QUEUE_KEYS = ("copied", "decoded", "loading")

def to_stderr(line):
    """The default log=: the line on stderr, flushed."""
    print(line, file=sys.stderr, flush=True)


def watch(loader, *, warmup_steps=10, batch_size=None, log=to_stderr, jsonl=None, epoch=0, name=None):
    """`loader` wrapped so that every pass over it reports the host's wait, the GPU's idle share and samples/s.

    loader: any iterable of batches. warmup_steps: leading steps of each epoch left out of the figures.
    batch_size: an int, or a function batch -> samples; None: the len of the batch's first tensor (a tuple's or
    list's first item, a dict's first value, searched depth first). log: a callable given each epoch's line, None
    for silence (default: stderr). jsonl: a path; each epoch's record is appended to it as one JSON line, flushed.
    epoch: the number of the first epoch; name: a label at the start of the line and in the records.
    Returns a Watch (see its docstring: records, end_epoch, set_epoch and the pass-through)."""
    return Watch(loader, warmup_steps=warmup_steps, batch_size=batch_size, log=log, jsonl=jsonl, epoch=epoch,
                 name=name)


class Watch:
    """An iterable standing in for `loader`: iter() starts an epoch's pass over it and measures each step.

    Its own attributes: records (a list of dicts, one per epoch ended, RECORD_FIELDS), wrapped (the loader),
    end_epoch(), set_epoch(). Everything else is the loader's: len(), state_dict(), load_state_dict(), dataset,
    sampler, ... are forwarded (an AttributeError where the loader has none), so that the Watch can replace the loader
    everywhere. A Watch is made once and iterated every epoch; pinfeed.watch(loader) in each epoch's `for` makes a
    new one whose epochs all count from `epoch`.
    """

    def __init__(self, loader, *, warmup_steps=10, batch_size=None, log=to_stderr, jsonl=None, epoch=0, name=None):
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int):
            raise TypeError(f"pinfeed.watch: warmup_steps must be an int, got {warmup_steps!r}")
        if warmup_steps < 0:
            raise ValueError(f"pinfeed.watch: warmup_steps must be >= 0, got {warmup_steps}")
        if batch_size is not None and not callable(batch_size):
            if isinstance(batch_size, bool) or not isinstance(batch_size, int):
                raise TypeError(f"pinfeed.watch: batch_size must be None, an int or a function of the batch, "
                                f"got {batch_size!r}")
            if batch_size < 1:
                raise ValueError(f"pinfeed.watch: batch_size must be >= 1, got {batch_size}")
        if log is not None and not callable(log):
            raise TypeError(f"pinfeed.watch: log must be a callable taking a line, or None, got {log!r}")
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise TypeError(f"pinfeed.watch: epoch must be an int, got {epoch!r}")
        self.wrapped = loader
        self.records = []
        self._warmup = warmup_steps
        self._batch_size = batch_size
        self._log = log
        self._jsonl = os.fspath(jsonl) if jsonl is not None else None
        self._epoch = epoch   # the number the next pass takes
        self._name = name
        self._pass = None     # the pass under way
        self._events = {}     # device index -> CUDA events free for reuse

    def __iter__(self):
        """A new epoch's pass (a pass left unfinished is ended first: its record has complete=False)."""
        self.end_epoch()
        self._pass = _Pass(self, iter(self.wrapped), self._epoch)
        self._epoch += 1
        return self._pass

    def __len__(self):
        return len(self.wrapped)  # TypeError, as len() of the loader, where it has no len

    def __bool__(self):  # not len(): an empty loader's Watch is still a Watch
        return True

    def __getattr__(self, name):
        # Only for names the Watch itself lacks. Dunder names are not forwarded: copy, pickle and the like must see
        # the Watch, not the loader.
        if name.startswith("__") or "wrapped" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def set_epoch(self, epoch):
        """The number of the next epoch; forwarded to the loader's set_epoch where it has one (DataLoader's sampler
        does not: call sampler.set_epoch as before)."""
        self._epoch = epoch
        forward = getattr(self.wrapped, "set_epoch", None)
        if forward is not None:
            forward(epoch)

    def end_epoch(self):
        """Ends the pass under way now, as if the loader had ended it: its record, line and JSON line. For a loop
        left with `break`, or one that takes a fixed number of steps from an endless iterable; the last step handed
        out ends here. Returns the record, or None when no pass was under way."""
        p, self._pass = self._pass, None
        if p is None or p.ended:
            return None
        return p.finish(complete=False)

    def _report(self, record):
        self.records.append(record)
        if self._log is not None:
            self._log(format_line(record))
        if self._jsonl is not None:
            with open(self._jsonl, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


class _Pass:
    """One epoch's iterator: the wrapped iterator's batches, each step timed."""

    def __init__(self, watch, iterator, epoch):
        self._watch, self._it, self.epoch = watch, iterator, epoch
        self.ended = False
        self._handed = 0          # batches handed out
        self._open = False        # a batch handed out whose step has not been closed yet
        self._t_handout = 0.0     # perf_counter at the last hand-out
        self._t_first = None      # at the first request
        self._t_timed = None      # at the request of the first timed batch
        self._t_end = None        # at the end of the last timed step
        self._waits = []          # ms, timed steps
        self._bodies = []         # ms, host time from hand-out to the next request, timed steps
        self._samples = 0
        self._sizes_known = True
        self._clock = None        # a _StreamClock once a batch is seen on CUDA
        self._cuda = None         # None until the first batch tells
        # The loader's queue_depth() (pinfeed's ImageFolderLoader), sampled after each timed hand-out: key -> values
        depth = getattr(watch.wrapped, "queue_depth", None)
        self._depth_of = depth if callable(depth) else None
        self._depths = {}

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:  # a later pass began: no longer measured
            return next(self._it)
        t0 = time.perf_counter()
        if self._t_first is None:
            self._t_first = t0
        if self._open:
            self._close_step(t0)
        if self._handed == self._watch._warmup and self._t_timed is None:
            self._t_timed = t0
        try:
            batch = next(self._it)
        except StopIteration:
            if self._watch._pass is self:
                self._watch._pass = None
            self.finish(complete=True, now=t0)
            raise
        t1 = time.perf_counter()
        if self._cuda is None:
            tensor = first_tensor(batch)
            self._cuda = tensor is not None and tensor.is_cuda
            if self._cuda:
                self._clock = _StreamClock(tensor.device, self._watch._events, self._watch._warmup)
        if self._clock is not None:
            self._clock.step_start(self._handed)
        if self._handed >= self._watch._warmup:
            self._waits.append((t1 - t0) * 1e3)
            if self._depth_of is not None:
                depth = self._depth_of()
                for key in QUEUE_KEYS:
                    if key in depth:
                        self._depths.setdefault(key, []).append(depth[key])
            size = self._size(batch)
            if size is None:
                self._sizes_known = False
            else:
                self._samples += size
        self._handed += 1
        self._open = True
        self._t_handout = t1
        return batch

    def _size(self, batch):
        bs = self._watch._batch_size
        if bs is None:
            tensor = first_tensor(batch)
            return None if tensor is None or tensor.dim() == 0 else int(tensor.shape[0])
        return int(bs(batch)) if callable(bs) else bs

    def _close_step(self, now):
        """The step of the last batch handed out ends: its queued work is all before `now`."""
        self._open = False
        if self._clock is not None:
            self._clock.step_end()
        if self._handed > self._watch._warmup:  # a timed step
            self._bodies.append((now - self._t_handout) * 1e3)
            self._t_end = now

    def finish(self, complete, now=None):
        self.ended = True
        now = time.perf_counter() if now is None else now
        if self._open:
            self._close_step(now)
        w = self._watch
        steps = len(self._waits)
        warmup = min(self._handed, w._warmup)
        start = self._t_first if self._t_first is not None else now
        warmup_end = self._t_timed if self._t_timed is not None else now
        host = (self._t_end - self._t_timed) if steps and self._t_end is not None else 0.0
        idle = gpu = None
        compute = _mean(self._bodies)
        if self._clock is not None:
            busy_ms, idle_ms, gaps = self._clock.finish()
            window = busy_ms + idle_ms
            seconds = window / 1e3
            if steps:
                compute = busy_ms / steps
                idle = idle_ms / window if window > 0 else 0.0
                gpu = idle_ms / gaps if gaps else 0.0
        else:
            seconds = host
        samples = self._samples if self._sizes_known else None
        waits = sorted(self._waits)
        record = {
            "name": w._name,
            "epoch": self.epoch,
            "complete": complete,
            "device": f"cuda:{self._clock.device.index}" if self._clock is not None else "cpu",
            "steps": steps,
            "warmup_steps": warmup,
            "warmup_seconds": max(warmup_end - start, 0.0),
            "samples": samples,
            "seconds": seconds,
            "host_seconds": host,
            "samples_per_s": samples / seconds if samples is not None and steps and seconds > 0 else None,
            "steps_per_s": steps / seconds if steps and seconds > 0 else None,
            "wait_ms_mean": _mean(waits),
            "wait_ms_p50": percentile(waits, 0.5),
            "wait_ms_p95": percentile(waits, 0.95),
            "wait_ms_max": waits[-1] if waits else None,
            "compute_ms_mean": compute if steps else None,
            "gpu_idle": idle,
            "gpu_idle_ms_mean": gpu,
        }
        for key in QUEUE_KEYS:
            values = self._depths.get(key, [])
            record[f"queue_{key}_mean"] = _mean(values)
            record[f"queue_{key}_min"] = min(values) if values else None
        w._report(record)
        return record


class _StreamClock:
    """Two CUDA events per step on the device's current stream (S_k after hand-out, E_k at the next request),
    read when query() says they are done; sums the timed steps' busy (S_k -> E_k) and idle (E_k-1 -> S_k) ms."""

    def __init__(self, device, pools, warmup):
        self.device = device
        self._pool = pools.setdefault(device.index, [])
        self._warmup = warmup
        self._pending = deque()   # [step, S, E or None], oldest first
        self._prev_end = None     # E of the step before the oldest pending one, resolved
        self.busy_ms = self.idle_ms = 0.0
        self.gaps = 0

    def _record(self):
        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def step_start(self, step):
        self._pending.append([step, self._record(), None])

    def step_end(self):
        self._pending[-1][2] = self._record()
        self._resolve(wait=False)

    def _resolve(self, wait):
        while self._pending and self._pending[0][2] is not None:
            step, start, end = self._pending[0]
            prev = self._prev_end
            if wait:
                for e in (end, start, prev):  # the last step's end first: the others are then done (one stream)
                    if e is not None:
                        e.synchronize()
            elif not (end.query() and start.query() and (prev is None or prev.query())):
                return
            self._pending.popleft()
            if step >= self._warmup:
                self.busy_ms += max(start.elapsed_time(end), 0.0)
                if prev is not None:  # the gap before the first timed step counts when a warm-up step precedes it
                    self.idle_ms += max(prev.elapsed_time(start), 0.0)
                    self.gaps += 1
            self._pool.append(start)
            if prev is not None:
                self._pool.append(prev)
            self._prev_end = end

    def finish(self):
        """Waits for the pass's last event (the one synchronisation), then returns (busy ms, idle ms, gaps)."""
        self._resolve(wait=True)
        if self._prev_end is not None:
            self._pool.append(self._prev_end)
            self._prev_end = None
        return self.busy_ms, self.idle_ms, self.gaps


def first_tensor(batch):
    """The first tensor of a batch: itself, a tuple's or list's first items, a dict's first values, depth first."""
    stack = [batch]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            return item
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
    return None


def percentile(sorted_values, q):
    """Linear interpolation between the closest ranks (numpy's default), as pinfeed's StepMeter; None when empty."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _mean(values):
    return sum(values) / len(values) if values else None


def fmt_ms(v):
    """3-4 significant digits, as pinfeed's lines print milliseconds; "n/a" for None."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.3g}" if v < 1 else f"{v:.4g}" if v < 1000 else f"{v:.0f}"


def _fmt_s(v):
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def format_line(r, label=None):
    """An epoch's line: `epoch 3: 6,512 samples/s, wait p50 0.03 ms p95 0.1 ms, GPU idle 1.2%, 195 steps in 7.7 s
    (+10 warm-up in 2.1 s)`; `label` in place of "[name ]epoch N"."""
    if label is None:
        label = f"{r['name'] + ' ' if r['name'] else ''}epoch {r['epoch']}"
    rate = f"{r['samples_per_s']:,.0f} samples/s" if r["samples_per_s"] is not None else (
        f"{r['steps_per_s']:,.1f} steps/s" if r["steps_per_s"] is not None else "n/a samples/s")
    idle = "n/a" if r["gpu_idle"] is None else f"{100 * r['gpu_idle']:.1f}%"
    line = (f"{label}: {rate}, wait p50 {fmt_ms(r['wait_ms_p50'])} "
            f"ms p95 {fmt_ms(r['wait_ms_p95'])} ms, GPU idle {idle}, {r['steps']} steps in {_fmt_s(r['seconds'])} s")
    if r["warmup_steps"]:
        line += f" (+{r['warmup_steps']} warm-up in {_fmt_s(r['warmup_seconds'])} s)"
    if not r["complete"]:
        line += ", ended before the loader's end"
    return line

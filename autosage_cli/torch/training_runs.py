"""How the training suites time epochs: a Run (one model's times and losses), a Trainer (a model's
step, made and warmed up, whose epochs run in chunks on request) and `alternate`, which runs
several Trainers' timed epochs in turns.

Why turns: an eager small-graph epoch is host time, and the host's speed drifts within one process
(on the H100 lent in this work the same eager step took 1.18 ms and 1.82 ms minutes apart). Timed
one after the other, two libraries' epochs meet different hosts and their ratio moves with the
drift; timed in turns, each library's median is taken over the same stretches of time. Kept apart
from training.py, which builds the models; training re-exports these names."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

TURNS = 5      # turns the timed epochs of alternating Trainers are split into


class Timer:
    """Epoch time: CUDA events on a GPU, the wall clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            self.ms = (time.perf_counter() - self.t0) * 1e3
        self.wall_ms = (time.perf_counter() - self.t0) * 1e3
        return False


@dataclass
class Run:
    """One library's training of one model: epoch times of the timed steps, every step's loss, the
    wall time of the untimed warm-up epochs, and why it did not run (status "failed"/"skipped")."""
    library: str
    mode: str = ""
    times_ms: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    setup_ms: float = float("nan")
    status: str = "ok"
    error: str = ""
    reorder: str = ""           # ours on a reordered graph (torch.reordered): the method
    reorder_s: float = float("nan")

    def stats(self) -> tuple[float, float, float]:
        """(median, p20, p80) of the timed epochs."""
        if not self.times_ms:
            return (float("nan"),) * 3
        return tuple(float(np.percentile(self.times_ms, q)) for q in (50, 20, 80))


class Trainer:
    """make_step(model, graph, x, labels, warmup)'s step, made and run through its `warmup` untimed
    epochs (their wall time and the making are the Run's setup_ms); `epochs(n)` runs n more, timed.
    Every epoch's loss is kept."""

    def __init__(self, make_step, model, graph, x, labels, warmup: int, run: Run | None = None):
        t0 = time.perf_counter()
        self.step = make_step(model, graph, x, labels, warmup)
        self.device = x.device
        self.run = run if run is not None else Run("")
        self.run.setup_ms = (time.perf_counter() - t0) * 1e3
        for _ in range(warmup):
            self.run.setup_ms += self._epoch().wall_ms

    def _epoch(self) -> Timer:
        with Timer(self.device) as timer:
            loss = self.step()
        self.run.losses.append(loss.item())
        return timer

    def epochs(self, n: int) -> Run:
        for _ in range(n):
            self.run.times_ms.append(self._epoch().ms)
        return self.run


def train(make_step, model, graph, x, labels, steps: int, warmup: int) -> Run:
    """`steps` epochs of make_step(model, graph, x, labels, warmup)(); the first `warmup` and the
    making of the step are setup, the rest timed."""
    warm = min(warmup, steps)
    return Trainer(make_step, model, graph, x, labels, warm).epochs(steps - warm)


def turns(n: int, count: int = TURNS) -> list[int]:
    """n timed epochs split into at most `count` turns as even as they go (larger ones first)."""
    count = max(1, min(count, n))
    return [n // count + (i < n % count) for i in range(count)]


def alternate(trainers: dict, timed: int, failed) -> None:
    """The trainers' `timed` epochs in turns: each turn runs a chunk of every trainer's epochs, one
    trainer after the other. A trainer whose epoch raises leaves the rotation: failed(key, exc)
    records why (its Run is then the caller's to replace)."""
    live = dict(trainers)
    for chunk in turns(timed):
        for key, trainer in list(live.items()):
            try:
                trainer.epochs(chunk)
            except Exception as exc:    # out of memory, a compile error: that trainer's outcome
                del live[key]
                failed(key, exc)

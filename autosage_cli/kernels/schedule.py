"""Schedules as data (Triton `Config`, Sputnik `spmm_config.h` style).

A `Schedule` is a frozen description of one way to run an op: the kernel family (one `.cu` file per
family under cuda/) and its knobs. Its `name` is stable and used in the cache, CSV rows and test ids.
The registry of each op is generated from value lists and named predicates in a *space module*
(`spmm_space`, `sddmm_space`, `attention_space`), never by copying kernels. Only `launch()`
computes grid and block sizes.

Space module contract: it defines `SCHEDULES: tuple[Schedule, ...]` and calls `register_family()`
for each family it owns, giving the family's kernel file, its name-expression builder and its
K/heads predicate.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import AutosageError

OPS = ("spmm", "sddmm", "attention")
SPACE_MODULES = {op: f"{__package__}.{op}_space" for op in OPS}
REDUCTIONS = ("none", "atomic", "twophase")


@dataclass(frozen=True)
class Schedule:
    op: str                  # "spmm" | "sddmm" | "attention"
    family: str              # kernel family, e.g. "subwarp", "warprow", "split", "rowgroup", "edge"
    lanes: int = 32          # lanes per group (a group owns one row, row-chunk or (row, head))
    vec: int = 1             # elements per lane per step (vector width of loads/stores)
    threads: int = 256       # threads per block
    tile: int = 0            # features per pass (0: the whole K in one pass)
    split: int = 0           # rows with more nonzeros than this are split (0: never split)
    chunk: int = 0           # nonzeros per chunk of a split row
    reduce: str = "none"     # how split partials combine: "none" | "atomic" | "twophase"
    unroll: int = 1          # edges unrolled per step / edges staged per warp batch
    heads_per_block: int = 1  # attention: heads handled by one block

    @property
    def name(self) -> str:
        parts = [self.op, self.family, f"g{self.lanes}", f"v{self.vec}", f"t{self.threads}"]
        if self.tile:
            parts.append(f"k{self.tile}")
        if self.unroll != 1:
            parts.append(f"u{self.unroll}")
        if self.split:
            parts.append(f"s{self.split}c{self.chunk}{self.reduce[0]}")
        elif self.chunk:  # rows cut into chunks that need no reduction (e.g. SDDMM, outputs per edge)
            parts.append(f"c{self.chunk}")
        if self.heads_per_block != 1:
            parts.append(f"h{self.heads_per_block}")
        return ".".join(parts)

    def params(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def groups_per_block(self) -> int:
        return self.threads // self.lanes

    def validate(self) -> None:
        """Raise ValueError if the knobs are inconsistent."""
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}")
        if self.family not in _FAMILIES:
            raise ValueError(f"unknown family {self.family!r} for {self.op}")
        if self.lanes not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"lanes must be a power of two <= 32, got {self.lanes}")
        if self.vec not in (1, 2, 4):
            raise ValueError(f"vec must be 1, 2 or 4, got {self.vec}")
        if self.threads % 32 or not 32 <= self.threads <= 1024 or self.threads % self.lanes:
            raise ValueError(f"threads must be a multiple of 32 in [32, 1024], got {self.threads}")
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS}")
        if self.split and (self.chunk <= 0 or self.reduce == "none"):
            raise ValueError("a split schedule needs chunk > 0 and a reduction")
        if self.tile < 0 or self.unroll < 1 or self.heads_per_block < 1:
            raise ValueError("tile, unroll and heads_per_block must be positive")

    def supports(self, k: int, heads: int = 1) -> str | None:
        """None if this schedule can run width k (and heads); otherwise the reason it cannot."""
        if k < 1:
            return f"K must be >= 1, got {k}"
        return _FAMILIES[self.family].supports(self, k, heads)

    @property
    def source_file(self) -> str:
        return _FAMILIES[self.family].source_file

    def name_expression(self, dtype: str = "float") -> str:
        """The C++ template instantiation CuPy compiles for this schedule (NVRTC name expression)."""
        return _FAMILIES[self.family].name_expression(self, dtype)

    def launch(self, n_items: int, k: int,
               lanes_per_item: int | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block) for `n_items` work items (rows, chunks or row-heads, as the family says),
        one group of `lanes` lanes per item, feature tiles along grid.y. `lanes_per_item` overrides
        the lanes one item takes (a family whose items are whole warps says so through
        Family.lanes_per_item; a multi-launch plan passes it per launch). n_items = 0 still gives one
        block, so a launch is always well formed; kernels bound-check their items."""
        block = (self.threads, 1, 1)
        per_item = lanes_per_item or self.lanes_per_item
        items_per_block = max(1, self.threads // per_item)
        groups = max(1, -(-n_items // items_per_block))
        tiles = 1 if not self.tile else max(1, -(-k // self.tile))
        return (groups, tiles, 1), block

    @property
    def lanes_per_item(self) -> int:
        """Threads one work item occupies: `lanes`, unless the family gives its items whole warps."""
        hook = _FAMILIES[self.family].lanes_per_item if self.family in _FAMILIES else None
        return hook(self) if hook else self.lanes


@dataclass(frozen=True)
class Family:
    source_file: str                                   # file name under cuda/
    name_expression: Callable[[Schedule, str], str]    # schedule, dtype -> "kernel<...>"
    supports: Callable[[Schedule, int, int], "str | None"]
    # Threads per work item when it is not `lanes` (e.g. warp-per-row families with lanes < 32).
    lanes_per_item: "Callable[[Schedule], int] | None" = None


_FAMILIES: dict[str, Family] = {}
_EXTRA: list[Schedule] = []


def register_family(name: str, family: Family) -> None:
    _FAMILIES[name] = family


def registry(op: str) -> tuple[Schedule, ...]:
    if op not in OPS:
        raise AutosageError(f"unknown op {op!r}; choose one of {', '.join(OPS)}")
    space = importlib.import_module(SPACE_MODULES[op])
    return tuple(space.SCHEDULES) + tuple(s for s in _EXTRA if s.op == op)


def space_version(op: str | None = None) -> str:
    """A short hash of the registered schedule names (of `op`, or of every op): a decision cached
    when the space held other schedules may have missed a better one, so it is re-tuned."""
    import hashlib

    names = sorted(s.name for o in ((op,) if op else OPS) for s in registry(o))
    return hashlib.blake2b("\n".join(names).encode(), digest_size=6).hexdigest()


def all_schedules() -> tuple[Schedule, ...]:
    return tuple(s for op in OPS for s in registry(op))


def get(name: str) -> Schedule:
    op = name.split(".", 1)[0]
    for schedule in registry(op) if op in OPS else ():
        if schedule.name == name:
            return schedule
    raise AutosageError(f"unknown schedule {name!r}")


def candidates(op: str, k: int, heads: int = 1) -> tuple[Schedule, ...]:
    """Registered schedules of `op` that can run width k (unsupported ones are skipped, never run)."""
    return tuple(s for s in registry(op) if s.supports(k, heads) is None)


@contextlib.contextmanager
def extra_schedules(*schedules: Schedule, families: dict[str, Family] | None = None) -> Iterator[None]:
    """Register schedules (and families) for the duration of a block: used by tests, e.g. for a
    deliberately wrong schedule that the scheduler must probe and reject."""
    added = dict(families or {})
    for name, fam in added.items():
        register_family(name, fam)
    _EXTRA.extend(schedules)
    try:
        yield
    finally:
        for s in schedules:
            _EXTRA.remove(s)
        for name in added:
            _FAMILIES.pop(name, None)

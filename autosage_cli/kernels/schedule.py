"""Schedules as data (Triton `Config`, Sputnik `spmm_config.h` style).

A `Schedule` is a frozen description of one way to run an op: the kernel family (one templated
kernel in a cuda/ file) and its knobs. Its `name` is stable and used in the cache, CSV rows and
test ids. `launch()` computes the grid and block of a launch over work items (a group or warp
per row, chunk or edge run); the plans whose layout is not one item per group build their own
from their work lists (backends/native_spmm.py: the split grid of chunk and light-row blocks, the
persistent grid capped at the resident blocks, the stream windows; native_attention.py's combine
step; kernels/util.py's grid-stride helpers), with `threads` as the block size throughout.

Two kinds of module describe the schedules, and this one joins them:
  * family modules (`spmm_families`, `sddmm_families`, `attention_families`): one `Family` entry
    per kernel family (kernels/family.py: op, kernel file, name expression, `supports` with a
    reason, lanes per work item, what the knobs mean), with its predicates. `FAMILIES` below joins
    their tables, so importing this module is enough for every family to be known.
  * the space of an op: the schedules its families generate, in a fixed order (names are cache
    keys), each checked against its family's rules. The families carry their own schedules and
    rules, so the space is `family_space(table)` and the rules `check_family_rules`: a family's
    value lists live in its entry, and no op has a space module of its own.

The built-in ops' tables are joined here (`BUILTIN_FAMILIES`) and their spaces made by
`register_op`, the same call the op registry makes for a spec that brings its own families
(ops/: `OpSpec.families`). So a new op needs no line in this package; `known_ops()` lists the
built-in ops, then those registered.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from typing import Iterator

from ..errors import AutosageError
from . import attention_families, sddmm_families, spmm_families
from .family import Family
from ..dtypes import info as dtype_info, vector_bytes_fit

# The built-in ops and their family tables, registered below like any op's.
BUILTIN_FAMILIES: dict[str, dict[str, Family]] = {
    "spmm": spmm_families.FAMILIES, "sddmm": sddmm_families.FAMILIES, "attention": attention_families.FAMILIES}
OPS = tuple(BUILTIN_FAMILIES)
REDUCTIONS = ("none", "atomic", "twophase")
# Every built-in kernel family by name. The family modules own disjoint names; a clash would be a bug.
FAMILIES: dict[str, Family] = {name: f for table in BUILTIN_FAMILIES.values() for name, f in table.items()}


@dataclass(frozen=True)
class Schedule:
    """One way to run an op. The knobs are template parameters or launch shapes of the family's
    kernel, and several mean different things per family (`Family.knobs` says it in one line;
    docs/INTERNALS.md has the full table). G = lanes, V = vec, U = unroll:

      lanes  subwarp, split (light rows), sddmm rowgroup/edge, vector, fused: lanes of the group
             that owns one work item (a row, row chunk, edge run or (row, head)), 32/G groups per
             warp; warprow, splitwarp, split's heavy chunks: lanes per *edge slot* of a warp that
             owns the item (32/G slots on different edges, summed by shuffles); vector: the
             group's lanes split the row's edges, not its features; unfused: the softmax's lanes
             per (row, head).
      vec    elements per lane per load (16-byte loads: 4 floats or 8 halves; 8 is for the 2-byte
             types only); vector and unfused: always 1.
      tile   warprow: features per staging pass, P = tile / (G x V) register chunks, one pass per
             grid.y block (0: one chunk, a block loops over all passes); sddmm rowgroup: K held in
             registers (G x V x P, K <= tile); vector: KMAX, the sums a lane keeps (serves
             KMAX/2 < K <= KMAX); fused attention: d held in registers (G x V x NV); others: 0.
      split  rows with more nonzeros than this are cut into chunks (spmm split/splitwarp,
             fused_split); unfused: rows above it take a block of `threads` for the softmax.
      chunk  nonzeros per chunk of a split row; sddmm rowgroup without split: edges per row piece,
             each its own group (outputs are per edge, nothing to reduce).
      reduce how a split row's partials combine: "atomic" (into a per-row scratch) or "twophase"
             (per-chunk partials summed in a fixed order, deterministic); "none" without split.
      unroll U: spmm and sddmm rowgroup: edges whose gathers are in flight per step; sddmm edge:
             consecutive edges per group; vector: edges per lane in flight; fused: E edges per step.
      threads          threads per block (unfused: of the heavy-row softmax block too).
      heads_per_block  fused attention: heads whose groups form one team sharing the row's staged
                       indices (team = G x heads_per_block <= 32 lanes); 1 elsewhere.
    """
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

    @functools.cached_property
    def name(self) -> str:
        # cached: `get(name)` scans the registry by name, once per plan a mini-batch step prepares
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
        if self.op not in known_ops():
            raise ValueError(f"unknown op {self.op!r}")
        if not is_family(self.family):
            raise ValueError(f"unknown family {self.family!r} for {self.op}")
        if self.lanes not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"lanes must be a power of two <= 32, got {self.lanes}")
        if self.vec not in (1, 2, 4, 8):
            raise ValueError(f"vec must be 1, 2, 4 or 8, got {self.vec}")
        if self.threads % 32 or not 32 <= self.threads <= 1024 or self.threads % self.lanes:
            raise ValueError(f"threads must be a multiple of 32 in [32, 1024], got {self.threads}")
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS}")
        if self.split and (self.chunk <= 0 or self.reduce == "none"):
            raise ValueError("a split schedule needs chunk > 0 and a reduction")
        if self.tile < 0 or self.unroll < 1 or self.heads_per_block < 1:
            raise ValueError("tile, unroll and heads_per_block must be positive")

    def supports(self, k: int, heads: int = 1, dtype: str = "float32") -> str | None:
        """None if this schedule can run width k (and heads) in `dtype`; otherwise the reason it
        cannot. The element size bounds the vector width (16-byte loads: 4 floats, 8 halves); the
        family's own predicates decide the rest (K % vec included)."""
        if k < 1:
            return f"K must be >= 1, got {k}"
        return vector_bytes_fit(self.vec, dtype) or family_of(self.family).supports(self, k, heads)

    @property
    def source_file(self) -> str:
        return family_of(self.family).source_file

    def name_expression(self, dtype: str = "float") -> str:
        """The C++ template instantiation CuPy compiles for this schedule (NVRTC name expression)
        in `dtype`: a dtype name ("bfloat16") or its C++ type ("__nv_bfloat16")."""
        return family_of(self.family).name_expression(self, dtype_info(dtype).c_type)

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
        hook = family_of(self.family).lanes_per_item if is_family(self.family) else None
        return hook(self) if hook else self.lanes


# Families and schedules beyond the built-in tables: those of ops registered by the op registry
# (`register_op`), and those added for the length of an `extra_schedules` block (tests only).
_EXTRA_FAMILIES: dict[str, Family] = {}
_EXTRA: list[Schedule] = []
_REGISTERED_OPS: list[str] = []
_SPACES: dict[str, tuple[Schedule, ...]] = {}   # op -> its families' schedules, in order


def known_ops() -> tuple[str, ...]:
    """The built-in ops, then every op registered with its families."""
    return OPS + tuple(_REGISTERED_OPS)


def is_family(name: str) -> bool:
    return name in FAMILIES or name in _EXTRA_FAMILIES


def family_of(name: str) -> Family:
    """The family called `name` (KeyError if there is none)."""
    return _EXTRA_FAMILIES[name] if name in _EXTRA_FAMILIES else FAMILIES[name]


def family_space(families: dict[str, Family]) -> tuple[Schedule, ...]:
    """The schedules a table of families generates: every family's own, in table order, then
    their 2-byte-only shapes (so that float32's names keep their order when half shapes are added)."""
    makers = {name: functools.partial(Schedule, family.op, name) for name, family in families.items()}
    own = [s for name, f in families.items() if f.schedules for s in f.schedules(makers[name])]
    half = [s for name, f in families.items() if f.half_schedules for s in f.half_schedules(makers[name])]
    return tuple(own + half)


def check_family_rules(s: Schedule) -> None:
    """Schedule.validate() and the space rules of the schedule's family; raises ValueError."""
    s.validate()
    rules = family_of(s.family).space_rules
    reason = rules(s) if rules else None
    if reason:
        raise ValueError(f"{s.name}: {reason}")


def registry(op: str) -> tuple[Schedule, ...]:
    if op not in known_ops():
        raise AutosageError(f"unknown op {op!r}; choose one of {', '.join(known_ops())}")
    return _SPACES[op] + tuple(s for s in _EXTRA if s.op == op)


def register_op(op: str, families: dict[str, Family], *, _builtin: bool = False) -> None:
    """Make `op` known with its kernel families (the built-in ops below; the op registry for a spec
    that brings its own): its space is the schedules they generate (family_space), checked by
    their rules."""
    if op in _SPACES or (op in OPS and not _builtin):
        raise ValueError(f"op {op!r} exists already")
    clash = set(families) & (set(_EXTRA_FAMILIES) | (set() if _builtin else set(FAMILIES)))
    if clash:
        raise ValueError(f"families {sorted(clash)} exist already")
    strays = [name for name, family in families.items() if family.op != op]
    if strays:
        raise ValueError(f"families {strays} compute another op than {op}")
    if not _builtin:
        _REGISTERED_OPS.append(op)
        _EXTRA_FAMILIES.update(families)
    try:
        schedules = family_space(families)
        for s in schedules:
            check_family_rules(s)
    except ValueError:
        unregister_op(op)
        raise
    _SPACES[op] = schedules


def unregister_op(op: str) -> None:
    """Forget a registered op, its families and their schedules (a built-in op stays)."""
    if op in OPS:
        return
    if op in _REGISTERED_OPS:
        _REGISTERED_OPS.remove(op)
    _SPACES.pop(op, None)
    for name in [n for n, f in _EXTRA_FAMILIES.items() if f.op == op]:
        del _EXTRA_FAMILIES[name]
    _EXTRA[:] = [s for s in _EXTRA if s.op != op]


def space_version(op: str | None = None) -> str:
    """A short hash of the registered schedule names (of `op`, or of every op): a decision cached
    when the space held other schedules may have missed a better one, so it is re-tuned."""
    import hashlib

    names = sorted(s.name for o in ((op,) if op else known_ops()) for s in registry(o))
    return hashlib.blake2b("\n".join(names).encode(), digest_size=6).hexdigest()


def all_schedules() -> tuple[Schedule, ...]:
    return tuple(s for op in known_ops() for s in registry(op))


def get(name: str) -> Schedule:
    op = name.split(".", 1)[0]
    for schedule in registry(op) if op in known_ops() else ():
        if schedule.name == name:
            return schedule
    raise AutosageError(f"unknown schedule {name!r}")


def candidates(op: str, k: int, heads: int = 1, dtype: str = "float32") -> tuple[Schedule, ...]:
    """Registered schedules of `op` that can run width k in `dtype` (unsupported ones are skipped,
    never run)."""
    return tuple(s for s in registry(op) if s.supports(k, heads, dtype) is None)


@contextlib.contextmanager
def extra_schedules(*schedules: Schedule, families: dict[str, Family] | None = None) -> Iterator[None]:
    """Register schedules (and families, with the schedules they generate) for the duration of a
    block: used by tests, e.g. for a deliberately wrong schedule that the scheduler must probe and
    reject, or a family defined by its entry alone."""
    added = dict(families or {})
    clash = set(added) & set(FAMILIES)
    if clash:
        raise ValueError(f"families {sorted(clash)} exist already")
    schedules = schedules + family_space(added)
    _EXTRA_FAMILIES.update(added)
    _EXTRA.extend(schedules)
    try:
        yield
    finally:
        for s in schedules:
            _EXTRA.remove(s)
        for name in added:
            _EXTRA_FAMILIES.pop(name, None)


for _op, _families in BUILTIN_FAMILIES.items():
    register_op(_op, _families, _builtin=True)

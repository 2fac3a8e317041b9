"""Cost model: a cheap, pure prediction of a schedule's time from the graph's features.

It only has to *rank* the registry well enough that the true best schedule is among the top-k that
get probed; the probe decides. Each launch is modelled by the resource that binds it:

* **bytes** — compulsory traffic (indptr, indices, values, gathered dense rows, output) over DRAM
  bandwidth; gathers read whole 32-byte sectors and hit L2 when the dense operand fits in L2 or the
  graph's locality keeps neighbours close (on the H200, locality made cuSPARSE 1.5-1.9x faster on
  products-sized graphs);
* **latency** — a group walks its row edge by edge; each edge costs a dependent index load and a
  gather (hidden only by unrolling), once per feature pass of `lanes x vec` features. Few lanes or
  narrow vectors at a wide K mean many passes; many lanes at a small K mean idle lanes and few groups
  in flight (Little's law: concurrency = resident threads / lanes);
* **issue** — warp instructions over the SMs' issue rate (matters when lanes sit idle);
* **load path** — every warp-wide gather load holds the SM's load/store path for LSU_CYCLES
  whatever its width, added to the bytes' time: the same sectors fetched with scalar loads take
  more instructions (fitted to the H200 attention runs of 6a0dd38: at H=8, d=64 the time grew by
  ~13 ms per extra load per edge on reddit-like, 917M edge-heads: ~3.7 cycles per load per SM);
* **critical path** — the longest single work item: a whole row of `degree_max` edges for an unsplit
  row-per-group schedule, at most `split`/`chunk` edges for a split one. Items reach the SMs in id
  order, so the longest may start last: its path is ADDED to the balanced time (Graham's bound),
  not hidden behind it (on reddit-like, attention H=1, every unsplit fused schedule ran 11.6-22 ms
  and the split ones 7-10 ms at the same bytes). Groups sharing a warp wait for the longest of their
  rows (expected maximum from the degree quantiles) — but the groups of one row's heads (fused
  attention) walk the same edges and do not diverge;
* **launches** — a fixed overhead per kernel launch.

The constants describe the H200 (132 SMs, 60 MiB L2, 4.17 TB/s measured copy bandwidth) and are
rough on purpose: a model that ranks is enough, and its errors are caught by probing.
"""
from __future__ import annotations

import math

from .. import dtypes, ops as op_specs
from ..kernels import schedule as schedule_mod
from ..kernels.schedule import Schedule
from ..ops.cost.gathers import gather_bytes
from ..ops.cost.roofline import FLOAT, INDEX, DeviceModel, H200, DegreeProfile, Launch, launch_ms
from ..ops.cost.row_walks import RowWork, launches, row_launches


def spec_rows(op: str):
    """The row walk of an op that has no cost models here, from its spec alone: each edge gathers
    the spec's dense rows of width k (`gathers_per_edge`, from operands of n_cols rows), and the
    output is written once; a new op is ranked by this until it brings models of its own."""
    spec = op_specs.get(op)

    def model(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
        gathers = max(1, spec.gathers_per_edge(heads) // max(1, heads))
        out_elements = math.prod(spec.output_shape(f, k, heads))
        return row_launches(f, prof, k, s, dev, heads, RowWork(
            dense_bytes=f.n_cols * k * elem * heads * gathers, gathers_per_edge=gathers,
            row_in_bytes=0.0, out_bytes=out_elements * elem), elem)
    return model


def cost_models(op: str):
    """The cost models of `op`: its spec's (`OpSpec.cost_models`, name -> model), else the row
    walk of its spec alone (`spec_rows`)."""
    return op_specs.get(op).cost_models or {"rows": spec_rows(op)}


def _launches(f, prof, k, s, dev, heads, elem, op) -> list[Launch]:
    """The launches of `s` running `op`, by the model its family names among the op's."""
    return launches(cost_models(op), f, prof, k, s, dev, heads, elem)


def estimate_ms(features, op: str, k: int, schedule: Schedule, heads: int = 1,
                device: DeviceModel = H200, profile: DegreeProfile | None = None,
                dtype: str = dtypes.DEFAULT) -> float:
    """Predicted time (ms) of `schedule` running `op` at width k (d for attention) with `heads`
    on `dtype` operands (dense, value and output bytes in its element size)."""
    if op not in op_specs.names():
        raise ValueError(f"unknown op {op!r}")
    prof = profile or DegreeProfile(features)
    elem = dtypes.itemsize(dtype)
    return sum(launch_ms(w, device)
               for w in _launches(features, prof, k, schedule, device, heads, elem, op))


def estimate_vendor_ms(features, op: str, k: int, heads: int = 1, device: DeviceModel = H200,
                       dtype: str = dtypes.DEFAULT) -> float:
    """A rough vendor time, shown beside the native estimates (the probe measures the real one):
    the same compulsory traffic at 70% of the bandwidth a native kernel is credited with (cuSPARSE
    is nnz-balanced, so no critical path), plus one launch per stage. The op's spec says what is
    gathered per edge, what is streamed and how many stages a vendor composition takes; dense
    bytes and A's values are in the dtype's element size."""
    spec, size = op_specs.get(op), dtypes.itemsize(dtype)
    nnz, n = float(features.nnz), float(features.n_rows)
    gathers = nnz * spec.gathers_per_edge(heads)
    dram_g, l2_g = gather_bytes(features, k, features.n_cols * k * size * heads, device, gathers,
                                element_bytes=size)
    out = spec.vendor_stream(n, nnz, k, heads) * size
    stages = spec.vendor_stages
    dram = (n + 1) * INDEX + nnz * (INDEX + size) * stages + dram_g + out
    memory_us = max(dram / (device.dram_tbps * 1e6), l2_g / (device.l2_tbps * 1e6)) / 0.7
    return (memory_us + stages * device.launch_us) / 1e3


def rank(features, op: str, k: int, heads: int = 1, device: DeviceModel = H200,
         schedules=None, dtype: str = dtypes.DEFAULT) -> list[tuple[Schedule, float]]:
    """Supported schedules of `op` in `dtype` (ops.candidates: its space's, or those it runs of
    another op's; or the given ones it runs that support k/heads/dtype), with their estimates,
    fastest first. Ties go to the simpler schedule (unsplit, then by name)."""
    pool = (op_specs.candidates(op, k, heads, dtype) if schedules is None
            else [s for s in schedules if op_specs.runs_schedule(op, s) is None
                  and s.supports(k, heads, dtype) is None])
    prof = DegreeProfile(features)
    scored = [(s, estimate_ms(features, op, k, s, heads, device, prof, dtype)) for s in pool]
    return sorted(scored, key=lambda sm: (sm[1], sm[0].split > 0, sm[0].name))


def shortlist(ranked: list[tuple[Schedule, float]], top_k: int,
              spread: float = 2.0) -> list[tuple[Schedule, float]]:
    """The `top_k` to probe: first the best schedule of every family whose best estimate is within
    `spread` x the overall best (estimates within a family share their errors, so one
    representative per plausible family guards against a family-wide miss), then the rest by rank.
    Returned in estimate order."""
    if not ranked or top_k <= 0:
        return []
    best = ranked[0][1]
    picked, seen = [], set()
    for s, ms in ranked:
        if s.family not in seen and ms <= spread * best and len(picked) < top_k:
            picked.append((s, ms))
        seen.add(s.family)
    for item in ranked:
        if len(picked) >= top_k:
            break
        if item not in picked:
            picked.append(item)
    order = {id(s): i for i, (s, _) in enumerate(ranked)}
    return sorted(picked, key=lambda sm: order[id(sm[0])])

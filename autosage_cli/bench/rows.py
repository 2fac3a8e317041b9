"""The results schema: one `Row` per graph × op × K × heads × backend.

The first 25 fields are the schema's fixed columns, in a fixed order; everything after them is an
extra column (extras are only ever appended). CSV and JSON both render `Row.to_dict()`, so the two
files always carry the same columns in the same order.

`compulsory_bytes` (indptr + indices + values + the dense inputs once + the output once) and
`gather_bytes` (the no-reuse bound: every dense row an edge needs, once per edge) come from the op's
spec (`OpSpec.compulsory_bytes`, `OpSpec.gather_bytes`), in the case's dtype.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# The schema's fixed columns, in order. Tests pin this tuple; never reorder it.
SCHEMA_COLUMNS = (
    "graph", "n_rows", "nnz", "op", "k", "heads", "dtype", "backend", "schedule", "decision",
    "ms_median", "ms_p20", "ms_p80", "prepare_ms", "rel_error", "best_vendor", "best_vendor_ms",
    "speedup_vs_best_vendor", "speedup_vs_vendor_default", "compulsory_bytes", "effective_tbps",
    "copy_tbps", "commit", "gpu", "timestamp",
)

DECISIONS = ("probe", "oracle", "cache", "fixed")
# Row status: "ok" (verified and timed), "wrong" (ran, failed verification, and so never timed),
# "failed" (prepare or launch raised; the reason is in `error`), "unverified" (timed, but no
# vendor output was available to check it against), "skipped" (a baseline that cannot run here:
# not installed, or would not fit in memory; the reason is in `error`).
STATUSES = ("ok", "wrong", "failed", "unverified", "skipped")


@dataclass
class Row:
    graph: str
    n_rows: int
    nnz: int
    op: str
    k: int
    heads: int
    dtype: str
    backend: str
    schedule: str
    decision: str
    ms_median: float = math.nan
    ms_p20: float = math.nan
    ms_p80: float = math.nan
    prepare_ms: float = math.nan
    rel_error: float = math.nan
    best_vendor: str = ""
    best_vendor_ms: float = math.nan
    speedup_vs_best_vendor: float = math.nan
    speedup_vs_vendor_default: float = math.nan
    compulsory_bytes: int = 0
    effective_tbps: float = math.nan
    copy_tbps: float = math.nan
    commit: str = ""
    gpu: str = ""
    timestamp: str = ""
    # ---- extra columns (after the fixed ones) ----
    status: str = "ok"
    error: str = ""                 # why a row failed or was marked wrong (one line)
    chosen_backend: str = ""        # autosage rows: what the scheduler chose (native or a vendor name)
    reason: str = ""                # autosage rows: the decision's reason
    probe_agrees: str = ""          # autosage probe/cache rows with --oracle: "yes" | "no" | ""
    oracle_schedule: str = ""
    oracle_ms: float = math.nan
    tune_ms: float = math.nan       # wall time of the tune() call (a cache hit is cheap)
    features_ms: float = math.nan   # the graph's features, computed once per graph
    fingerprint_ms: float = math.nan  # hashing the graph for the cache key, once per graph
    warm_tune_ms: float = math.nan  # a second tune() right after the first: a cache hit
    compile_ms: float = math.nan    # building kernel modules during this row's prepare (and, for
                                    # autosage rows, its tune); ~0 when precompiled before the run
    # Autosage probe rows: where tune_ms went (scheduler/probing/phases.py; wall ms, exclusive): the GPU
    # time the probe measured, then uploading the graph, making the inputs, picking the reference,
    # preparing and timing the vendors and the natives, verification runs, imports of optional
    # vendor libraries (torch, nvmath) in the tune, and the rest of the probe.
    probe_gpu_ms: float = math.nan
    probe_upload_ms: float = math.nan
    probe_inputs_ms: float = math.nan
    probe_reference_ms: float = math.nan
    probe_vendor_prepare_ms: float = math.nan
    probe_vendor_timing_ms: float = math.nan
    probe_native_prepare_ms: float = math.nan
    probe_native_timing_ms: float = math.nan
    probe_verify_ms: float = math.nan
    probe_imports_ms: float = math.nan
    probe_other_ms: float = math.nan
    provider: str = ""              # which implementation a vendor plan used (e.g. sddmm's)
    n_cols: int = 0
    gather_bytes: int = 0
    repeats: int = 0
    flush_l2: bool = False
    seed: int = 0
    loss_first: float = math.nan    # training rows: the loss of the first and of the last epoch
    loss_last: float = math.nan
    # mini-batch training rows (--suite minibatch): the first step's time, the step on a batch
    # whose graph input is already built and planned, the tuning probes autosage ran over the
    # steps, and the median time to sample one batch (outside the steps' times)
    first_step_ms: float = math.nan
    floor_ms: float = math.nan
    probes: int = 0
    sample_ms: float = math.nan
    # reordered graphs (`autosage bench --reorder`): the method (empty for the user's order), the
    # seconds it cost (computing the order and relabelling the graph); training rows also the
    # epoch with that cost spread over AMORTISE_EPOCHS epochs, and our epoch on the user's order
    # over it
    reorder: str = ""
    reorder_s: float = math.nan
    amortised_ms: float = math.nan
    speedup_vs_user_order: float = math.nan

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Row":
        """A Row from a dict of strings (a CSV line) or of JSON values; unknown keys are ignored,
        missing extra columns take their defaults (older files stay readable)."""
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            kwargs[f.name] = _parse(f.type, data[f.name])
        missing = [c for c in SCHEMA_COLUMNS if c not in kwargs]
        if missing:
            raise ValueError(f"row lacks schema columns {', '.join(missing)}")
        return cls(**kwargs)


AMORTISE_EPOCHS = 100    # a reordering's cost spread over a training run of this many epochs
ALL_COLUMNS = tuple(f.name for f in dataclasses.fields(Row))
EXTRA_COLUMNS = ALL_COLUMNS[len(SCHEMA_COLUMNS):]
# The probe's split of tune_ms: the tune's timings of the same names.
PROBE_COLUMNS = tuple(c for c in EXTRA_COLUMNS if c.startswith("probe_") and c.endswith("_ms"))
assert ALL_COLUMNS[:len(SCHEMA_COLUMNS)] == SCHEMA_COLUMNS, "Row fields must start with the schema columns"


def _parse(type_name, value):
    if value is None:
        return math.nan if type_name == "float" else value
    if type_name == "float":
        return math.nan if value == "" else float(value)
    if type_name == "int":
        return 0 if value == "" else int(float(value))
    if type_name == "bool":
        return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")
    return str(value)


def json_value(x):
    """JSON has no NaN/inf: NaN -> null, ±inf -> "inf"/"-inf" (Row.from_dict reads both back)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def effective_tbps(nbytes: int, ms: float) -> float:
    """Compulsory bytes over the measured time, in TB/s (10^12 bytes per second)."""
    if not (ms > 0) or not math.isfinite(ms):
        return math.nan
    return nbytes / (ms * 1e-3) / 1e12


def speedup(baseline_ms: float, ms: float) -> float:
    """baseline / ours; NaN when either time is missing (a failed row never gets a speed-up)."""
    if not (ms > 0 and baseline_ms > 0) or not (math.isfinite(ms) and math.isfinite(baseline_ms)):
        return math.nan
    return baseline_ms / ms


__all__ = ["Row", "SCHEMA_COLUMNS", "EXTRA_COLUMNS", "ALL_COLUMNS", "PROBE_COLUMNS", "DECISIONS", "STATUSES",
           "effective_tbps", "speedup", "json_value"]

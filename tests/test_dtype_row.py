"""One row per value type: every consumer of a type reads it from `dtypes.DTYPES`, so the row is the
only place a new type is described (docs/INTERNALS.md, "Adding a value type").

Each test walks every row through one consumer (the helper kernels' codecs and groups, the compile
defines, the CUDA library data type, torch, the API's reading of arrays, host rounding, poisoning,
the op specs), and the structure test below keeps any module from telling types apart by their
storage or element size instead."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from autosage_cli import api, dtypes, ops
from autosage_cli.backends import timing, value_arrays
from autosage_cli.cuda_sources import kernel_source
from autosage_cli.errors import AutosageError
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import util

ROWS = list(dtypes.DTYPES.values())
IDS = [t.name for t in ROWS]
PACKAGE = Path(__file__).resolve().parents[1] / "autosage_cli"


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_the_helper_kernels_have_its_codec_and_groups(t):
    assert t.codec in util.CODECS
    assert re.search(rf"^struct {t.codec}\b", kernel_source("util.cuh"), re.M), t.codec
    assert f"values/{t.codec}" in util.GROUPS
    assert all(f"reference/{op}/{t.codec}/int" in util.GROUPS for op in util.REFERENCE_OPS)
    # a narrow type's tune runs the device reference, float32's does not (its vendors decide)
    narrow_groups = [g for g in util.tune_groups("spmm", t.name) if g.startswith("reference/")]
    assert bool(narrow_groups) == t.narrow


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_its_kernels_compile_with_its_header_define(t):
    expression = f"spmm_subwarp<{t.c_type}, 8, 1, 1>"
    options = kcompile.runtime_options([expression])
    assert (f"-D{t.header_define}=1" in options) == bool(t.header_define)
    assert re.search(rf"\bto_float\({re.escape(t.c_type)} x\)", kernel_source("common.cuh")), t.c_type
    if t.header_define:
        assert f"#if {t.header_define}" in kernel_source("common.cuh")


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_its_cuda_data_type_is_the_library_enum_of_its_width(t):
    assert value_arrays.cuda_data_type(t.name) == t.cuda_data_type
    header = Path("/usr/local/cuda/include/library_types.h")
    if not header.exists():
        pytest.skip("no CUDA toolkit header to read the enum from")
    enum = {int(v): (int(bits), kind) for bits, kind, v in
            re.findall(r"CUDA_R_(\d+)(\w*)\s*=\s*(\d+)", header.read_text())}
    assert enum[t.cuda_data_type][0] == 8 * t.itemsize


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_torch_knows_it_by_its_torch_name(t):
    torch = pytest.importorskip("torch")
    from autosage_cli.torch.cuda import VALUE_TYPES

    torch_dtype = getattr(torch, t.torch_name)
    assert VALUE_TYPES[torch_dtype] == t.name
    assert torch.empty((), dtype=torch_dtype).element_size() == t.itemsize


class _Array:
    """What the API reads of a user array before the GPU: its dtype."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_the_api_reads_an_array_of_its_storage_as_it(t):
    assert api._element_type("B", _Array(t.storage), t.name) == t.name
    if t.bit_patterns:   # bits of another type: only when the caller names the type
        with pytest.raises(AutosageError, match=f'dtype="{t.name}"'):
            api._element_type("B", _Array(t.storage), None)
    else:
        assert api._element_type("B", _Array(t.storage), None) == t.name


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_host_rounding_poisoning_and_errors_follow_the_row(t):
    x = np.array([1.0, -0.5, 3.0, 0.25], np.float64)   # exact in every type
    stored = dtypes.to_storage(x, t.name)
    assert stored.dtype == np.dtype(t.storage)
    assert dtypes.of_storage(stored.dtype) is t
    assert np.array_equal(dtypes.from_storage(stored, t.name), x)
    assert timing.rel_error(stored, x) == 0.0          # compared by value, not by bits
    assert np.isnan(dtypes.from_storage(timing.poison(stored.copy()), t.name)).all()
    assert dtypes.vendor_slack(t.name) == (dtypes.VENDOR_SLACK_2BYTE if t.narrow else 1.0)
    assert t.max_vec * t.itemsize == dtypes.MAX_VECTOR_BYTES
    assert dtypes.vector_bytes_fit(t.max_vec, t.name) is None
    assert dtypes.vector_bytes_fit(2 * t.max_vec, t.name) is not None


@pytest.mark.parametrize("t", ROWS, ids=IDS)
def test_every_op_accepts_it(t):
    assert all(t.name in ops.get(op).dtypes for op in ops.names())


def test_no_two_rows_share_a_storage_codec_or_c_type():
    for field in ("storage", "codec", "c_type", "torch_name", "cuda_data_type"):
        values = [getattr(t, field) for t in ROWS]
        assert len(set(values)) == len(values), field


# The torch layers' CuPy view table (torch/cuda.py, `_CUPY_TYPES`) still names bfloat16's storage
# itself; it is the one place left, listed here so that the next one is not added unseen.
STORAGE_NAMED = {("torch/cuda.py", "uint16")}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel != "dtypes.py":
            yield rel, ast.parse(path.read_text())


def test_no_module_tells_a_type_by_its_storage_or_element_size():
    bits_storages = {t.storage for t in ROWS if t.bit_patterns}
    found = []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and node.value in bits_storages
                    and (rel, node.value) not in STORAGE_NAMED):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if (any(isinstance(s, ast.Attribute) and s.attr == "itemsize" for s in sides)
                        and any(isinstance(s, ast.Constant) for s in sides)):
                    found.append(f"{rel}:{node.lineno}: itemsize compared with a constant")
    assert not found, found

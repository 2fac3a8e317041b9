"""Install-time cubins on a real GPU: a kernel loaded from them computes what NVRTC's build of the
same source computes, and a first tune on an empty kernel cache compiles nothing at all (neither
autosage's kernels nor CuPy's). Each case runs in a fresh process (CuPy reads CUPY_CACHE_DIR when
imported). The cubins are the package's when its install built them from these sources, else a
build of the listing made here with nvcc. Run on the H200 (`make test-gpu`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autosage_cli.cuda_sources import CUDA_DIR
from autosage_cli import prebuild
from autosage_cli.kernels import cubins

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"


@pytest.fixture(scope="module")
def cubin_dir(tmp_path_factory) -> Path:
    manifest = cubins.read_manifest()
    if manifest is not None and cubins.is_current(manifest):
        return cubins.PREBUILT_DIR
    if prebuild.tools() is None:
        pytest.skip("no install-time cubins of these sources and no nvcc/c++filt to build them")
    out = tmp_path_factory.mktemp("cubins")
    prebuild.build(CUDA_DIR, out, log=lambda message: None)
    return out


def fresh(cache_dir: Path, cubin_dir: Path, args, use_prebuilt: bool = True) -> dict:
    """A new process on an empty kernel cache; the JSON object on its last stdout line."""
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache_dir), "AUTOSAGE_PREBUILT_DIR": str(cubin_dir),
           "AUTOSAGE_PREBUILT": "1" if use_prebuilt else "0",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


RUN_SCHEDULES = """
import json, sys
import cupy
from autosage_cli import ops
from autosage_cli.backends.base import DeviceGraph
from autosage_cli.backends.value_arrays import to_float32
from autosage_cli.graphs.load import load_graph
from autosage_cli.kernels import compile as kc, cubins
d = DeviceGraph.from_host(load_graph(dataset="cora", root=sys.argv[1]))
out = {}
for name, k, dtype in (("spmm.warprow.g16.v4.t256.u4", 64, "float32"),
                       ("spmm.split.g8.v8.t256.u8.s256c256a", 64, "bfloat16"),
                       ("sddmm.edge.g4.v4.t256.u2", 32, "float16")):
    plan = ops.prepare_native(d, name, k, 1, None, dtype)
    inputs = ops.make_inputs(plan.op, d, k, 1, 3, dtype)
    result = plan.alloc_out()
    plan.run(inputs, result)
    out[name] = to_float32(result, dtype).get().ravel().tolist()
refs = [r.ref for r in kc.compiled_log()]
out["loaded"] = sum(cubins.functions(r.source_file, r.expressions, kc.module_options(r.expressions))
                    is not None for r in refs)
out["modules"] = len(refs)
print(json.dumps(out))
"""


def test_a_prebuilt_kernel_computes_what_nvrtc_builds(tmp_path, cubin_dir):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    script = ["-c", textwrap.dedent(RUN_SCHEDULES), str(DATASETS)]
    loaded = fresh(tmp_path / "a", cubin_dir, script)
    compiled = fresh(tmp_path / "b", cubin_dir, script, use_prebuilt=False)
    assert loaded.pop("loaded") == loaded.pop("modules") > 3 and compiled.pop("loaded") == 0
    compiled.pop("modules")
    assert not os.listdir(tmp_path / "a") and os.listdir(tmp_path / "b")   # only NVRTC wrote the cache
    import numpy as np

    for name, values in loaded.items():   # the same source and options: the same arithmetic
        np.testing.assert_allclose(values, compiled[name], rtol=1e-6, atol=0, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
# The layers' variant ops too (the listing's PREBUILT_VARIANT_OPS). spmm-bias's float64 reference
# adds the bias with a CuPy ufunc, which CuPy compiles into its cache: of that op, only autosage's
# own modules must all come from the cubins.
@pytest.mark.parametrize("op, heads, cupy_compiles", [("spmm", 1, False), ("sddmm", 1, False),
                                                     ("attention", 4, False), ("attention-additive", 4, False),
                                                     ("spmm-bias", 1, True)])
def test_a_first_tune_with_prebuilt_kernels_compiles_nothing(tmp_path, cubin_dir, op, heads, cupy_compiles, dtype):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    doc = fresh(kernels, cubin_dir, ["-m", "autosage_cli.cli", "tune", "--dataset", "cora", "--root", str(DATASETS),
                                  "--op", op, "--width", "64", "--heads", str(heads), "--dtype", dtype,
                                  "--cache", str(tmp_path / "decisions.json"), "--json"])
    assert not doc["cache_hit"] and any(c["status"] == "ok" for c in doc["candidates"])
    assert cupy_compiles or os.listdir(kernels) == []      # no NVRTC compile, ours or CuPy's
    t = doc["timings"]
    assert t["modules_prebuilt"] > 3 and t["modules_compiled"] == 0

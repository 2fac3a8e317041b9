"""Install-time cubins (prebuild.py, ops/listing.py, kernels/cubins.py) on the CPU: the listing is current,
nvcc's kernels are matched to every name expression, stale or foreign builds are refused, and the
build module stays importable by setup.py (standard library only)."""
from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import pytest

from autosage_cli.cuda_sources import CUDA_DIR, sources_hash
from autosage_cli import prebuild
from autosage_cli.kernels import compile as kcompile, cubins
from autosage_cli.ops import listing

needs_nvcc = pytest.mark.skipif(prebuild.tools() is None, reason="nvcc or c++filt is not on PATH")


def test_the_listing_in_cuda_is_current():
    """cuda/prebuilt.json lists what the registry and the helper groups hold now (refresh it with
    `python -m autosage_cli.ops.listing`)."""
    assert (CUDA_DIR / prebuild.LISTING).read_text() == listing.listing_text()


def test_the_listing_has_every_helper_group_and_each_dtype_of_a_schedule_file():
    names = {m["name"] for m in listing.listing()["modules"]}
    assert {"util/core", "util/values/BF16", "util/reference/spmm/F16/long long"} <= names
    assert {"spmm_split/float32", "spmm_split/bfloat16", "spmm_split/float16"} <= names
    two_byte = next(m for m in listing.listing()["modules"] if m["name"] == "spmm_split/bfloat16")
    assert "-DAUTOSAGE_2BYTE_TYPES=1" in two_byte["options"]
    assert not any(o.startswith("-I") for o in two_byte["options"])


def test_the_listing_has_the_layers_variant_kernels_apart_with_their_options():
    modules = {m["name"]: m for m in listing.listing()["modules"]}
    bias = modules["spmm_subwarp/bfloat16/spmm-bias"]
    assert bias["file"] == "spmm_subwarp.cu" and "-DAUTOSAGE_SPMM_EPILOGUE=1" in bias["options"]
    assert all("Epilogue<autosage::Identity, true>" in e for e in bias["expressions"])
    assert "-DAUTOSAGE_SPMM_EPILOGUE=1" not in modules["spmm_subwarp/bfloat16"]["options"]
    # and the epilogue a vendor SpMM's plan launches after cuSPARSE
    assert modules["spmm_epilogue/bfloat16/spmm-bias"]["expressions"] == [
        "spmm_epilogue<__nv_bfloat16, autosage::Epilogue<autosage::Identity, true>>"]
    additive = modules["attention_fused/float32/attention-additive"]
    own = {e for e in additive["expressions"] if e.startswith("attention_additive")}
    assert own and not own & set(modules["attention_fused/float32"]["expressions"])
    # besides its own kernels only the partials' merges it shares with the plain score's plans
    assert set(additive["expressions"]) - own <= set(modules["attention_fused/float32"]["expressions"])
    # the variants' own modules hold 32-bit indices only
    assert not any("long long" in e for m in modules.values() if m["name"].count("/") == 2
                   and not m["name"].startswith("util/") for e in m["expressions"])


@pytest.mark.parametrize("demangled, expression", [
    ("void spmm_split<__nv_bfloat16, 8, 8, 4, true, false>(int, int const*)",
     "spmm_split<__nv_bfloat16, 8, 8, 4, true, false>"),
    ("void autosage_convert<autosage_util::F16, autosage_util::F32>(autosage_util::F16::T const*, long long)",
     "autosage_convert<F16, F32>"),
    ("void attention_softmax_heavy<int, 256, float>(int const*)", "attention_softmax_heavy<int, 256>"),
    ("autosage_fill_u32", "autosage_fill_u32"),
    # cu++filt's (EDG) spelling of the same kernel
    ("void spmm_split<__nv_bfloat16, (int)8, (int)8, (int)4, (bool)1, (bool)0>(int, const int *)",
     "spmm_split<__nv_bfloat16, 8, 8, 4, true, false>"),
])
def test_a_demangled_kernel_matches_its_expression(demangled, expression):
    assert prebuild.match_names([expression], {"_Zmangled": demangled}) == {expression: "_Zmangled"}


def test_unmatched_or_ambiguous_expressions_are_left_to_nvrtc():
    demangled = {"_Za": "void f<int, 25, float>(int)", "_Zb": "void f<int, 25, double>(int)",
                 "_Zc": "void f<int, 250>(int)"}
    # f<int, 25> extends to two kernels: ambiguous; f<int, 2> prefixes none (25 and 250 differ).
    assert prebuild.match_names(["f<int, 25>", "f<int, 2>", "f<int, 250>"], demangled) == {"f<int, 250>": "_Zc"}


def test_the_build_module_imports_only_the_standard_library():
    """setup.py loads it by path in pip's isolated build environment (setuptools only)."""
    tree = ast.parse(Path(prebuild.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import needs the package"
            roots = [node.module.split(".")[0]]
        elif isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        else:
            continue
        assert all(r in sys.stdlib_module_names or r == "__future__" for r in roots), roots


def test_the_runtime_demangler_spells_kernels_as_nvrtc_expressions():
    mangled = "_Z10spmm_splitI13__nv_bfloat16Li8ELi8ELi2ELb1ELb0EEviPKiS2_"
    names = prebuild.demangler()([mangled, "autosage_fill_u32"])
    assert names["autosage_fill_u32"] == "autosage_fill_u32"           # extern "C": as it is
    assert prebuild.match_names(["spmm_split<__nv_bfloat16, 8, 8, 2, true, false>"], names) == {
        "spmm_split<__nv_bfloat16, 8, 8, 2, true, false>": mangled}


def test_without_nvcc_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuild.shutil, "which", lambda name: None)
    messages = []
    assert prebuild.build(CUDA_DIR, tmp_path / "out", log=messages.append) is None
    assert not (tmp_path / "out").exists() and "compile on first use" in messages[0]


def _fake_manifest(directory: Path, options: list[str], hash_: str | None = None, arch: str = "90",
                   ptxas=(16, 0, 0, 0)) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    module = {"file": "util.cu", "options": options, "cubin": "util.core.sm_90.cubin",
              "names": {"autosage_fill_u32": "autosage_fill_u32"}, "ptxas": {"autosage_fill_u32": list(ptxas)}}
    manifest = {"version": 1, "sources_hash": hash_ or sources_hash(), "archs": {arch: {"util/core": module}}}
    (directory / prebuild.MANIFEST).write_text(json.dumps(manifest))


def test_a_current_build_is_used_and_a_stale_or_foreign_one_is_not(tmp_path):
    options = kcompile.module_options(["autosage_fill_u32"])
    _fake_manifest(tmp_path / "ok", options)
    assert cubins.Prebuilt(tmp_path / "ok").entries("util.cu", ["autosage_fill_u32"], options, "90") == [
        ("util.core.sm_90.cubin", "autosage_fill_u32")]
    other_arch = cubins.Prebuilt(tmp_path / "ok")
    assert other_arch.entries("util.cu", ["autosage_fill_u32"], options, "100") is None
    assert "sm_100" in other_arch.reason
    missing = cubins.Prebuilt(tmp_path / "ok")
    assert missing.entries("util.cu", ["autosage_fill_u32", "autosage_spin"], options, "90") is None
    _fake_manifest(tmp_path / "stale", options, hash_="0" * 24)
    stale = cubins.Prebuilt(tmp_path / "stale")
    assert stale.entries("util.cu", ["autosage_fill_u32"], options, "90") is None
    assert "other cuda/ sources" in stale.reason
    _fake_manifest(tmp_path / "options", options + ["-DAUTOSAGE_2BYTE_TYPES=1"])
    assert cubins.Prebuilt(tmp_path / "options").entries("util.cu", ["autosage_fill_u32"], options, "90") is None
    assert cubins.Prebuilt(tmp_path / "none").entries("util.cu", ["autosage_fill_u32"], options, "90") is None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The package's cubins when the install built them from these sources (CI's install does,
    with nvcc), else a fresh build of the whole listing."""
    manifest = cubins.read_manifest()
    if manifest is not None and cubins.is_current(manifest):
        return cubins.PREBUILT_DIR, manifest
    if prebuild.tools() is None:
        pytest.skip("nvcc or c++filt is not on PATH")
    out = tmp_path_factory.mktemp("cubins")
    return out, prebuild.build(CUDA_DIR, out, log=lambda message: None)


@needs_nvcc
def test_every_listed_expression_is_built_and_named(built):
    directory, manifest = built
    modules = manifest["archs"][prebuild.DEFAULT_ARCHS[0]]
    for m in listing.listing()["modules"]:
        entry = modules[m["name"]]
        assert entry["options"] == m["options"] and (directory / entry["cubin"]).stat().st_size > 0
        assert sorted(entry["names"]) == sorted(m["expressions"]) and not entry["unmatched"], m["name"]
        assert len(set(entry["names"].values())) == len(m["expressions"])   # one kernel each
        # ptxas' report of each kernel: registers, spill stores, spill loads, stack frame
        assert sorted(entry["ptxas"]) == sorted(m["expressions"]), m["name"]
        assert all(len(r) == 4 and 0 < r[0] <= 255 and min(r) >= 0 for r in entry["ptxas"].values())


PTXAS_V = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4sumsPKf' for 'sm_90'
ptxas info    : Function properties for _Z4sumsPKf
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function 'autosage_fill_u32' for 'sm_90'
ptxas info    : Function properties for autosage_fill_u32
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 372 bytes cmem[0]
"""


def test_ptxas_reports_are_read_per_kernel():
    assert prebuild.parse_ptxas(PTXAS_V) == {"_Z4sumsPKf": (64, 8, 12, 24), "autosage_fill_u32": (10, 0, 0, 0)}


def test_the_spill_checks_read_a_current_builds_report_and_compile_only_the_rest(tmp_path, monkeypatch):
    import ptxas_helpers

    options = kcompile.module_options(["autosage_fill_u32"])
    _fake_manifest(tmp_path, options, ptxas=(20, 4, 4, 8))
    monkeypatch.setattr(cubins, "PREBUILT_DIR", tmp_path)
    ptxas_helpers.recorded.cache_clear()     # each manifest below is read afresh
    compiled = []
    monkeypatch.setattr(kcompile, "nvcc_check", lambda f, exprs: compiled.append((f, exprs)) or
                        [kcompile.KernelReport(e, 1, 0, 0, 0) for e in exprs])
    got = ptxas_helpers.reports("util.cu", ["autosage_fill_u32", "autosage_fill_u16"])
    # the recorded report (spills included, so a check would fail on them), nvcc for the other
    assert got[0] == kcompile.KernelReport("autosage_fill_u32", 20, 4, 4, 8)
    assert compiled == [("util.cu", ["autosage_fill_u16"])]
    # a stale build, or one made with other options, is not read: everything compiles
    _fake_manifest(tmp_path, options, hash_="0" * 24)
    ptxas_helpers.recorded.cache_clear()
    compiled.clear()
    ptxas_helpers.reports("util.cu", ["autosage_fill_u32"])
    assert compiled == [("util.cu", ["autosage_fill_u32"])]
    _fake_manifest(tmp_path, options + ["-DAUTOSAGE_2BYTE_TYPES=1"])
    ptxas_helpers.recorded.cache_clear()
    compiled.clear()
    ptxas_helpers.reports("util.cu", ["autosage_fill_u32"])
    assert compiled == [("util.cu", ["autosage_fill_u32"])]


@needs_nvcc
def test_a_build_of_a_changed_source_tree_is_keyed_to_it(tmp_path):
    cuda = tmp_path / "cuda"
    shutil.copytree(CUDA_DIR, cuda)
    subset = {"modules": [m for m in listing.listing()["modules"] if m["name"] == "util/core"]}
    (cuda / prebuild.LISTING).write_text(json.dumps(subset))
    (cuda / "util.cu").write_text((cuda / "util.cu").read_text() + "\n// edited\n")
    manifest = prebuild.build(cuda, tmp_path / "out", log=lambda message: None)
    assert manifest["sources_hash"] == prebuild.sources_hash(cuda) != sources_hash()
    assert set(manifest["archs"]["90"]["util/core"]["names"]) == set(subset["modules"][0]["expressions"])


def test_a_module_nvcc_cannot_finish_is_left_to_nvrtc(tmp_path, monkeypatch):
    """A hung or missing compiler fails that module only; the install goes on."""
    import subprocess

    def hung(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))
    monkeypatch.setattr(prebuild, "tools", lambda: ("nvcc", lambda names: {}))
    monkeypatch.setattr(prebuild.subprocess, "run", hung)
    messages = []
    manifest = prebuild.build(CUDA_DIR, tmp_path / "out", log=messages.append)
    assert manifest["archs"]["90"] == {} and "failed: nvcc did not finish" in messages[-1]
    # progress while it runs (pip shows it with -v): a line first, then one per module
    modules = json.loads((CUDA_DIR / prebuild.LISTING).read_text())["modules"]
    assert messages[0].startswith(f"autosage: building {len(modules)} kernel modules for sm_90")
    counted = [m for m in messages if m.startswith("autosage: [")]
    assert len(counted) == len(modules) and counted[-1].startswith(f"autosage: [{len(modules)}/{len(modules)}]")

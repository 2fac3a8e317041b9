"""Cubins built at install time with nvcc, so that a first tune loads its kernels instead of
compiling them. Standard library only: setup.py loads this file by path inside pip's isolated
build environment, where neither NumPy nor CuPy nor autosage's other modules can be imported.

What is built comes from `cuda/prebuilt.json` (the listing, written by ops/listing.py from the
schedule registry and the helper groups; a CPU test keeps it current): modules, each a kernel file
with the name expressions instantiated in it and the options NVRTC gets for them. One nvcc call per
module compiles the text NVRTC would compile (`module_text`) with every expression instantiated,
for each architecture asked for, and ptxas names the kernels it compiled; their demangled names
(the C++ runtime's __cxa_demangle, else c++filt) are matched to the expressions (`match_names`), so
the loader can ask the cubin for each by its mangled name. The manifest records the architecture, the hash of the sources (a changed kernel file
makes every cubin stale: the loader then compiles with NVRTC as before) and, per module, its cubin
and names. Without nvcc (or a demangler) nothing is built and nothing fails.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

LISTING = "prebuilt.json"
DATASET_REGISTRY = "registry.json"
MANIFEST = "manifest.json"
DEFAULT_ARCHS = ("90",)          # sm_90: H100/H200, the GPUs the kernels are tuned for
NVCC_TIMEOUT_S = 900             # one module; the largest takes about 20 s on 2 cores
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
# EDG-style demanglers (cu++filt) spell integral template arguments as casts, (int)8 or (bool)1,
# and literals may carry suffixes (8u, 8ll); the GNU ones print 8 and true.
_CAST = re.compile(r"\((?:(?:unsigned|signed|long|short|int|char|bool)\s*)+\)")
_SUFFIX = re.compile(r"\b(\d+)(?:ull|ll|ul|u|l)\b", re.IGNORECASE)


def sources_hash(cuda_dir: Path) -> str:
    """Hash of every .cu/.cuh file under `cuda_dir`: the decision cache's software key, and what
    makes a prebuilt cubin current."""
    h = hashlib.blake2b(digest_size=12)
    for path in sorted(Path(cuda_dir).glob("*")):
        if path.suffix in (".cu", ".cuh"):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def copy_sources(cuda_dir: Path, dest: Path) -> int:
    """Copy the kernel sources (.cu, .cuh) and the module listing of `cuda_dir` into `dest`: a built
    install's package carries them there (cuda_sources.PACKAGED_CUDA), since the top-level cuda/
    is not part of it. Returns the number of files copied. A tree without kernel sources (an
    sdist made without MANIFEST.in's `graft cuda`) fails here rather than install a package that
    cannot build a kernel."""
    files = [p for p in sorted(Path(cuda_dir).glob("*")) if p.suffix in (".cu", ".cuh") or p.name == LISTING]
    if not any(p.suffix == ".cu" for p in files):
        raise FileNotFoundError(f"no kernel sources (.cu) in {cuda_dir}")
    return _copy_files(files, Path(dest))


def copy_datasets(datasets_dir: Path, dest: Path) -> int:
    """Copy the shipped graphs (`*.mtx.gz`), their registry and README from `datasets_dir` into
    `dest`: a built install's package carries them there (graphs.datasets.PACKAGED_DATASETS), so
    `--dataset cora` works away from the source tree. Only these: a dataset downloaded under the
    default --root (datasets/ogbn_*/) stays out. A tree without the registry fails here."""
    datasets_dir = Path(datasets_dir)
    if not (datasets_dir / DATASET_REGISTRY).is_file():
        raise FileNotFoundError(f"no dataset registry ({DATASET_REGISTRY}) in {datasets_dir}")
    files = sorted(datasets_dir.glob("*.mtx.gz")) + [datasets_dir / DATASET_REGISTRY]
    files += [p for p in (datasets_dir / "README.md",) if p.is_file()]
    return _copy_files(files, Path(dest))


def _copy_files(files: list[Path], dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copyfile(path, dest / path.name)
    return len(files)


def module_text(source: str, hash_: str) -> str:
    """The text a module is compiled from: the file, then a comment naming the hash of every
    source (CuPy's disk cache keys a module on its text, not on the headers it includes)."""
    return f"{source}\n// autosage cuda sources {hash_}\n"


def instantiations(expressions) -> str:
    """Lines that instantiate every name expression, as NVRTC's name expressions do (by taking its
    address), for nvcc."""
    return "\n".join(f"void* autosage_instance_{i} = (void*)&{e};" for i, e in enumerate(expressions))


def _normal(name: str) -> str:
    """A kernel name without spaces and namespace qualifiers: `void f<ns::F16, 8>(int, ...)` and
    the expression `f<F16, 8>` both become `f<F16,8>`."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    name = _SUFFIX.sub(r"\1", _CAST.sub("", _QUALIFIER.sub("", name)))
    name = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", name))
    return name.replace(" ", "")


def match_names(expressions, demangled: dict[str, str]) -> dict[str, str]:
    """expression -> mangled name, from {mangled: demangled} of one module's kernels. A name equal
    to the expression matches; else one whose template arguments extend the expression's (the
    defaults the expression leaves out). Ambiguous or missing expressions are left out (the
    loader compiles those with NVRTC)."""
    normal = {m: _normal(d) for m, d in demangled.items()}
    out = {}
    for expr in expressions:
        e = _normal(expr)
        exact = [m for m, n in normal.items() if n == e]
        if not exact and e.endswith(">"):
            exact = [m for m, n in normal.items() if n.startswith(e[:-1] + ",")]
        if len(exact) == 1:
            out[expr] = exact[0]
    return out


@functools.lru_cache(maxsize=1)
def _runtime_demangler():
    """abi::__cxa_demangle of the C++ runtime every Linux Python process can load (the GNU
    spelling, as binutils' c++filt), as a function of one name; None where it cannot be loaded."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        demangle = getattr(lib, "__cxa_demangle")
    except (OSError, AttributeError):
        return None
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]

    def one(name: str) -> str:
        status = ctypes.c_int(0)
        ptr = demangle(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return name          # not a mangled name (an extern "C" kernel)
        try:
            return ctypes.string_at(ptr).decode()
        finally:
            libc.free(ptr)
    return one


def demangler() -> Callable[[list[str]], dict[str, str]] | None:
    """names -> {mangled: demangled}: the C++ runtime's, else c++filt's; None without either."""
    one = _runtime_demangler()
    if one is not None:
        return lambda names: {n: one(n) for n in names}
    cxxfilt = shutil.which("c++filt") or shutil.which("cu++filt")
    if cxxfilt is None:
        return None

    def run(names: list[str]) -> dict[str, str]:
        proc = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, check=True)
        return dict(zip(names, proc.stdout.splitlines()))
    return run


def parse_ptxas(text: str) -> dict[str, tuple[int, int, int, int]]:
    """ptxas -v's report per kernel: mangled name -> (registers, spill store bytes, spill load
    bytes, stack frame bytes)."""
    reports, mangled, frame = {}, None, None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            mangled, frame = m.group(1), None
        elif (m := _FRAME.search(line)) and mangled:
            frame = tuple(int(x) for x in m.groups())
        elif (m := _REGISTERS.search(line)) and mangled and frame:
            reports[mangled] = (int(m.group(1)), frame[1], frame[2], frame[0])
            mangled = None
    return reports


def tools() -> tuple[str, Callable] | None:
    """(nvcc, a demangler), or None when nvcc or any demangler is missing."""
    nvcc, demangle = shutil.which("nvcc"), demangler()
    return (nvcc, demangle) if nvcc and demangle else None


def build_module(module: dict, cuda_dir: Path, hash_: str, arch: str, dest: Path, nvcc: str,
                 demangle: Callable) -> dict:
    """Compile one listing module for `arch` into dest; its manifest entry (cubin, names)."""
    cuda_dir = Path(cuda_dir)
    text = module_text((cuda_dir / module["file"]).read_text(), hash_)
    cubin = dest / f"{module['name'].replace('/', '.')}.sm_{arch}.cubin"
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / module["file"]
        cu.write_text(text + "\n// instantiations (name expressions)\n" + instantiations(module["expressions"]) + "\n")
        cmd = [nvcc, f"-arch=sm_{arch}", "-cubin", "-ftz=true", *module["options"], f"-I{cuda_dir}",
               "-Xptxas", "-v", "-o", str(cubin), str(cu)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"nvcc did not finish {module['name']}: {exc}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {module['name']}: {proc.stderr.strip()[-400:]}")
    names = match_names(module["expressions"], demangle(_ENTRY.findall(proc.stderr)))
    # ptxas' registers and spills per kernel, by expression: the no-spill check of every kernel
    # file (tests) reads the install's own report of the cubins it made instead of compiling again
    reports = parse_ptxas(proc.stderr)
    return {"file": module["file"], "options": list(module["options"]), "cubin": cubin.name, "names": names,
            "unmatched": [e for e in module["expressions"] if e not in names],
            "ptxas": {e: reports[m] for e, m in names.items() if m in reports}}


def build(cuda_dir: Path, dest: Path, archs=DEFAULT_ARCHS, jobs: int | None = None, log=print) -> dict | None:
    """Build every module of the listing for every arch into `dest` (replaced), with its manifest;
    the manifest, or None when nvcc or a demangler is missing or the listing is absent."""
    found = tools()
    listing_path = Path(cuda_dir) / LISTING
    if found is None or not listing_path.is_file():
        log("autosage: no nvcc (or demangler) or no cuda/prebuilt.json; kernels will compile on first use")
        return None
    nvcc, demangle = found
    modules = json.loads(listing_path.read_text())["modules"]
    hash_ = sources_hash(cuda_dir)
    dest = Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    manifest = {"version": 1, "sources_hash": hash_, "archs": {}}
    jobs = jobs or min(32, os.cpu_count() or 1)
    for arch in archs:
        # A line per module as it finishes: the build takes 45-90 s on 2 cores, and pip shows
        # these lines with -v (without it, each one turns its spinner).
        log(f"autosage: building {len(modules)} kernel modules for sm_{arch} with nvcc, {jobs} at a time "
            "(about a minute on 2 cores; AUTOSAGE_BUILD_CUBINS=0 skips this)")
        started = time.perf_counter()
        built, failed = {}, []
        with ThreadPoolExecutor(jobs) as pool:
            futures = {pool.submit(build_module, m, cuda_dir, hash_, arch, dest, nvcc, demangle): m["name"]
                       for m in modules}
            for done, fut in enumerate(as_completed(futures), 1):
                name = futures[fut]
                try:
                    built[name] = fut.result()
                except RuntimeError as exc:   # that module compiles with NVRTC at run time
                    failed.append(f"{exc}")
                log(f"autosage: [{done}/{len(modules)}] sm_{arch} {name} "
                    f"({'failed' if name not in built else 'built'}, {time.perf_counter() - started:.0f} s)")
        built = {m["name"]: built[m["name"]] for m in modules if m["name"] in built}   # listing order
        manifest["archs"][arch] = built
        unmatched = [e for m in built.values() for e in m["unmatched"]]
        log(f"autosage: {len(built)} prebuilt modules for sm_{arch}"
            + (f", {len(failed)} failed: {failed[0]}" if failed else "")
            + (f"; {len(unmatched)} kernels not named (they compile on first use): {unmatched[0]}"
               if unmatched else ""))
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest

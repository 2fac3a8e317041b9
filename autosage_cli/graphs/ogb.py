"""OGB node-property datasets (ogbn-arxiv, -products, -proteins, -papers100M) and the homogeneous
link-property ones (ogbl-ppa, -collab, -ddi, -citation2, -wikikg2) read from OGB's on-disk layout,
and downloaded when missing. Link-property datasets store their graph as node-property ones do
(ogb/linkproppred/dataset.py reads raw/ with the same read_csv_graph_raw); their edge splits are
not read. ogbl-biokg is heterogeneous (one edge file per relation) and is not among them.

Layout (ogb/nodeproppred/dataset.py): `<root>/<name with - as _>/raw/edge.csv.gz` (one `src,dst` line
per edge, no header) and `raw/num-node-list.csv.gz` (the node count); papers100M ships binary
`raw/data.npz` (`edge_index` 2 × E, `num_nodes_list`). OGB's master.csv decides `add_inverse_edge`:
True for products and proteins (stored once per undirected edge), False for arxiv and papers100M
(directed citations) — followed exactly, so ogbn-products has OGB's 123,718,280 nonzeros. Edges are a
pattern: value 1.0, repeats merged. Row = edge_index[0] (the source).

Download. Missing files are downloaded only when ogb is installed: the `ogb` extra is the user's opt-in
to multi-gigabyte downloads (products is 1.4 GB), so that is the gate. The transfer itself is urllib +
zipfile here rather than ogb.utils.url.download_url: ogb's helper prints to stdout (which must stay
machine-readable for --json), asks y/N on stdin above 1 GB (a hang in a non-interactive run), and
importing ogb imports torch. When ogb is installed its master.csv supplies the URL and layout flags
(read as a file, never imported), so a dataset OGB moves keeps working; the registry's copy of the
table is the fallback. Tests point the same code at a file:// URL.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

from ..errors import AutosageError
from .csr import CSRGraph, from_arrays
from .edges import csr_from_keys, sorted_unique_keys
from .readers import PARSE_ERRORS

DOWNLOAD_BLOCK = 1 << 20


def ogb_installed() -> bool:
    return importlib.util.find_spec("ogb") is not None


def task_folder(name: str) -> str:
    """The ogb subpackage whose master.csv lists `name`: linkproppred for ogbl-*, else nodeproppred."""
    return "linkproppred" if name.lower().startswith("ogbl-") else "nodeproppred"


def installed_master_table(task: str = "nodeproppred") -> dict[str, dict] | None:
    """The installed ogb package's <task>/master.csv as {name: {field: value}}, or None."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / task / "master.csv"
        if path.is_file():
            try:
                import pandas as pd

                return pd.read_csv(path, index_col=0).to_dict()
            except PARSE_ERRORS:
                return None
    return None


def _flag(value) -> bool:
    return str(value).strip().lower() == "true"


def dataset_meta(name: str, registry_params: dict) -> dict:
    """download_name, url, add_inverse_edge, binary: from installed ogb's table when it lists the
    dataset, else from the registry."""
    meta = {"download_name": registry_params.get("download_name"), "url": registry_params.get("url"),
            "add_inverse_edge": bool(registry_params.get("add_inverse_edge", False)),
            "binary": bool(registry_params.get("binary", False))}
    table = installed_master_table(task_folder(name)) or {}
    if name in table:
        column = table[name]
        meta.update(download_name=column.get("download_name", meta["download_name"]),
                    url=column.get("url", meta["url"]),
                    add_inverse_edge=_flag(column.get("add_inverse_edge", meta["add_inverse_edge"])),
                    binary=_flag(column.get("binary", meta["binary"])))
    return meta


def dataset_dir(root: Path, name: str) -> Path:
    return Path(root) / name.replace("-", "_")


def raw_files(raw: Path, binary: bool) -> list[Path]:
    if binary:
        return [raw / "data.npz"]
    return [raw / "edge.csv.gz", raw / "num-node-list.csv.gz"]


def read_raw(raw: Path, binary: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(sources, targets, number of nodes) from a raw/ directory."""
    import pandas as pd  # only a download's raw CSVs need it; loading anything else stays without it

    try:
        if binary:
            with np.load(raw / "data.npz", allow_pickle=False) as data:
                edge_index = np.asarray(data["edge_index"])
                n = int(np.asarray(data["num_nodes_list"]).sum())
            if edge_index.ndim != 2 or edge_index.shape[0] != 2:
                raise AutosageError(f"{raw / 'data.npz'}: edge_index must be 2 x E, got {edge_index.shape}")
            src, dst = edge_index[0].astype(np.int64), edge_index[1].astype(np.int64)
        else:
            # Typed columns let pandas' C parser skip inference (products: 62M lines); a non-integer
            # entry raises ValueError, reported below.
            edges = pd.read_csv(raw / "edge.csv.gz", header=None, compression="gzip", dtype=np.int64)
            if edges.shape[1] != 2:
                raise AutosageError(f"{raw / 'edge.csv.gz'}: expected two columns (src,dst), "
                                    f"found {edges.shape[1]}")
            src, dst = (edges[c].to_numpy(dtype=np.int64) for c in (0, 1))
            counts = pd.read_csv(raw / "num-node-list.csv.gz", header=None, compression="gzip")
            n = int(counts[0].astype(np.int64).sum())
    except AutosageError:
        raise
    except PARSE_ERRORS as exc:
        raise AutosageError(f"{raw}: cannot read OGB raw files: {' '.join(str(exc).split())}") from None
    return src, dst, n


def graph_from_raw(raw: Path, binary: bool, add_inverse_edge: bool, source: dict) -> CSRGraph:
    src, dst, n = read_raw(raw, binary)
    if n <= 0:
        raise AutosageError(f"{raw}: the node count must be positive, got {n}")
    for ids, what in ((src, "source"), (dst, "target")):
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids.min() if ids.min() < 0 else ids.max()
            raise AutosageError(f"{raw}: {what} node id {bad} outside [0, {n})")
    parts = [(src, dst), (dst, src)] if add_inverse_edge else [(src, dst)]
    keys = sorted_unique_keys(parts, n)
    del src, dst, parts
    indptr, indices = csr_from_keys(keys, n, n)
    return from_arrays(indptr, indices, np.ones(keys.shape[0], dtype=np.float32), (n, n), source)


def load_ogb(name: str, registry_params: dict, root: Path, source: dict,
             download: bool | None = None, progress: bool = True) -> CSRGraph:
    """The dataset from `<root>`; missing files are downloaded when `download` (default: ogb is
    installed), else a one-line error says how to get them."""
    meta = dataset_meta(name, registry_params)
    folder = dataset_dir(root, name)
    raw = folder / "raw"
    if not all(p.is_file() for p in raw_files(raw, meta["binary"])):
        if download is None:
            download = ogb_installed()
        if not download:
            missing = next(p for p in raw_files(raw, meta["binary"]) if not p.is_file())
            raise AutosageError(
                f"{name}: {missing} not found; install the ogb extra (pip install 'autosage[ogb]') to "
                f"download it, or unzip {meta['url']} into {Path(root).resolve()} and rename "
                f"{meta['download_name']}/ to {folder.name}/")
        download_dataset(meta["url"], Path(root), meta["download_name"], folder.name, progress)
        if not all(p.is_file() for p in raw_files(raw, meta["binary"])):
            raise AutosageError(f"{name}: the downloaded archive has no {raw_files(raw, meta['binary'])[0]}")
    return graph_from_raw(raw, meta["binary"], meta["add_inverse_edge"], source)


def fetch(url: str, dest: Path, progress: bool = True) -> None:
    """Stream `url` (http(s) or file://) to `dest` through a temporary file, with a progress bar on
    stderr; `dest` appears only when the transfer completed."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    tmp = None
    try:
        with urllib.request.urlopen(url) as response:  # noqa: S310 (the URL is OGB's or the user's)
            total = response.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
            with os.fdopen(fd, "wb") as out, Progress(
                    "[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), console=Console(stderr=True), disable=not progress,
                    transient=True) as bar:
                task = bar.add_task(f"downloading {url.rsplit('/', 1)[-1]}", total=total)
                while True:
                    block = response.read(DOWNLOAD_BLOCK)
                    if not block:
                        break
                    out.write(block)
                    bar.advance(task, len(block))
        os.replace(tmp, dest)
        tmp = None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AutosageError(f"download of {url} failed: {' '.join(str(exc).split())}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def extract_zip(archive: Path, into: Path) -> None:
    """Unzip, refusing members that would land outside `into` (absolute paths, `..`)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            base = into.resolve()
            for member in zf.namelist():
                target = (base / member).resolve()
                if target != base and base not in target.parents:
                    raise AutosageError(f"{archive}: member {member!r} would extract outside {into}")
            zf.extractall(base)
    except zipfile.BadZipFile as exc:
        raise AutosageError(f"{archive}: not a zip archive ({exc})") from None


def download_dataset(url: str, root: Path, download_name: str, dir_name: str,
                     progress: bool = True) -> Path:
    """OGB's procedure: fetch `<download_name>.zip` into root, extract, and rename the extracted
    `<download_name>/` to `<dir_name>/` (files already in `<dir_name>/` are kept). Returns that folder."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AutosageError(f"cannot create dataset root {root}: {exc}") from None
    archive = root / f"{download_name}.zip"
    fetch(url, archive, progress)
    try:
        extract_zip(archive, root)
    finally:
        archive.unlink(missing_ok=True)
    extracted, target = root / download_name, root / dir_name
    if not extracted.is_dir():
        raise AutosageError(f"{url}: the archive has no {download_name}/ folder")
    if extracted != target:
        if not target.exists():
            shutil.move(str(extracted), str(target))
        else:
            _merge_missing(extracted, target)
            shutil.rmtree(extracted)
    return target


def _merge_missing(src: Path, dst: Path) -> None:
    for child in src.iterdir():
        goal = dst / child.name
        if not goal.exists():
            shutil.move(str(child), str(goal))
        elif child.is_dir() and goal.is_dir():
            _merge_missing(child, goal)

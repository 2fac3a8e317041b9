"""Loaders: Matrix Market, .npz, edge lists, OGB's layout (and its download, offline through file://),
reddit's npz, the dataset registry, symmetrize, and reloading from a recorded source."""
from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from autosage_cli.graphs import datasets
from autosage_cli.errors import AutosageError
from autosage_cli.graphs import ogb
from autosage_cli.graphs.load import load_graph, load_source, symmetrized
from autosage_cli.graphs.synthetic import generate

DATASETS_DIR = Path(__file__).resolve().parent.parent / "datasets"


def _write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def _dense(graph):
    return graph.to_scipy().toarray()


# --- Matrix Market --------------------------------------------------------------------------------

def test_mtx_pattern_symmetric_is_expanded(tmp_path):
    f = _write(tmp_path / "g.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n2 1\n3 1\n3 3\n")
    g = load_graph(path=f)
    np.testing.assert_array_equal(_dense(g), [[0, 1, 1], [1, 0, 0], [1, 0, 1]])
    assert g.source == {"path": str(f.resolve()), "symmetrize": False}


def test_mtx_real_duplicates_summed_gz(tmp_path):
    f = _write(tmp_path / "g.mtx.gz",
               "%%MatrixMarket matrix coordinate real general\n% a comment\n2 3 3\n1 3 1.5\n1 3 2.0\n2 1 -4\n")
    g = load_graph(path=f)
    np.testing.assert_array_equal(_dense(g), [[0, 0, 3.5], [-4, 0, 0]])
    assert g.values.dtype == np.float32 and g.shape == (2, 3)


def test_mtx_skew_symmetric_and_integer(tmp_path):
    f = _write(tmp_path / "s.mtx", "%%MatrixMarket matrix coordinate integer skew-symmetric\n2 2 1\n2 1 7\n")
    np.testing.assert_array_equal(_dense(load_graph(path=f)), [[0, -7], [7, 0]])


def test_mtx_dense_array_layout_is_refused(tmp_path):
    f = _write(tmp_path / "d.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n0\n0\n3\n")
    with pytest.raises(AutosageError, match="dense 'array'.*coordinate"):
        load_graph(path=f)


@pytest.mark.parametrize("symmetry, entry, where", [
    ("symmetric", "1 3 5", "above the diagonal"),
    ("hermitian", "2 3 5", "above the diagonal"),
    ("skew-symmetric", "1 2 5", "on or above the diagonal"),
    ("skew-symmetric", "2 2 5", "on or above the diagonal"),
])
def test_mtx_entry_outside_the_lower_triangle_names_its_line(tmp_path, symmetry, entry, where):
    # Banner, two comment lines, a blank line, the size line, then entries on lines 6, 7, 8.
    text = (f"%%MatrixMarket matrix coordinate real {symmetry}\n% one\n% two\n\n3 3 3\n"
            f"2 1 1\n3 1 2\n{entry}\n")
    for name in ("m.mtx", "m.mtx.gz"):
        with pytest.raises(AutosageError, match=f"line 8: entry \\({entry[0]}, {entry[2]}\\) is {where}"):
            load_graph(path=_write(tmp_path / name, text))


def test_mtx_skew_symmetric_mirrors_with_the_sign_flipped(tmp_path):
    f = _write(tmp_path / "s.mtx.gz", "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n"
                                      "2 1 1.5\n3 2 -4\n")
    np.testing.assert_array_equal(_dense(load_graph(path=f)), [[0, -1.5, 0], [1.5, 0, 4], [0, -4, 0]])


def test_mtx_symmetric_must_be_square(tmp_path):
    f = _write(tmp_path / "r.mtx", "%%MatrixMarket matrix coordinate real symmetric\n3 4 1\n2 1 1\n")
    with pytest.raises(AutosageError, match="must be square"):
        load_graph(path=f)


def test_mtx_header_declaring_more_entries_than_the_file_holds(tmp_path):
    f = _write(tmp_path / "t.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 1000\n1 1 1\n")
    with pytest.raises(AutosageError, match="declares 1000 entries but the file can hold at most"):
        load_graph(path=f)


def test_mtx_empty_graph_is_valid(tmp_path):
    f = _write(tmp_path / "e.mtx", "%%MatrixMarket matrix coordinate real general\n4 5 0\n")
    g = load_graph(path=f)
    assert g.shape == (4, 5) and g.nnz == 0


@pytest.mark.parametrize("name", ["cora", "pubmed", "facebook_combined", "ca-CondMat", "wiki-Vote", "bcsstk16"])
def test_shipped_graphs_match_scipy_and_registry(name):
    path = DATASETS_DIR / f"{name}.mtx.gz"
    ref = scipy.io.mmread(str(path)).tocsr()
    ref.sum_duplicates()
    g = load_graph(path=path)
    assert g.shape == ref.shape and g.nnz == ref.nnz
    np.testing.assert_array_equal(g.indptr, ref.indptr)
    np.testing.assert_array_equal(g.indices, ref.indices)
    np.testing.assert_allclose(g.values, ref.data.astype(np.float32))
    entry = datasets.lookup(name)
    assert (entry.expect["n"], entry.expect["nnz"]) == (g.n_rows, g.nnz)
    by_name = load_graph(dataset=name)
    assert by_name.fingerprint == g.fingerprint
    assert by_name.source["dataset"] == name


# --- npz and edge lists ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["coo", "csr", "csc"])
def test_npz_any_sparse_format(tmp_path, fmt):
    m = sp.random(30, 20, density=0.2, format=fmt, random_state=1)
    sp.save_npz(tmp_path / "m.npz", m)
    g = load_graph(path=tmp_path / "m.npz")
    np.testing.assert_allclose(_dense(g), m.toarray(), rtol=1e-6)


def test_edge_list_pattern_with_comments_and_repeats(tmp_path):
    f = _write(tmp_path / "e.txt", "# SNAP header\n# FromNodeId\tToNodeId\n0\t2\n2 0\n0   2\n3 1\n")
    g = load_graph(path=f)
    assert g.shape == (4, 4)
    np.testing.assert_array_equal(_dense(g), [[0, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]])


def test_edge_list_gz_weighted_sums_repeats(tmp_path):
    f = _write(tmp_path / "w.txt.gz", "0 1 0.5\n0 1 0.25\n1 0 2\n")
    np.testing.assert_array_equal(_dense(load_graph(path=f)), [[0, 0.75], [2, 0]])


def test_edge_list_symmetrize(tmp_path):
    f = _write(tmp_path / "d.edges", "0 1\n1 2\n")
    plain = load_graph(path=f)
    both = load_graph(path=f, symmetrize=True)
    assert plain.nnz == 2 and both.nnz == 4
    np.testing.assert_array_equal(_dense(both), _dense(both).T)
    assert both.source["symmetrize"] is True


def test_symmetrized_keeps_a_values_where_present():
    a = sp.csr_matrix(np.array([[0, 2, 5], [3, 0, 0], [0, 0, 0]], dtype=float))
    from autosage_cli.graphs.csr import canonical_csr

    s = symmetrized(canonical_csr(a))
    np.testing.assert_array_equal(_dense(s), [[0, 2, 5], [3, 0, 0], [5, 0, 0]])


def test_symmetrize_needs_square(tmp_path):
    f = _write(tmp_path / "r.mtx", "%%MatrixMarket matrix coordinate real general\n2 3 1\n1 3 1\n")
    with pytest.raises(AutosageError, match="non-square"):
        load_graph(path=f, symmetrize=True)


# --- OGB layout ------------------------------------------------------------------------------------

EDGES = np.array([[0, 1], [1, 2], [3, 0], [2, 1]])  # (2, 1) reverses (1, 2): no duplicate once mirrored


def _write_ogb(folder: Path, edges=EDGES, n=5, binary=False) -> Path:
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    if binary:
        np.savez(raw / "data.npz", edge_index=edges.T.astype(np.int64), num_nodes_list=np.array([n]))
    else:
        _write(raw / "edge.csv.gz", "".join(f"{s},{d}\n" for s, d in edges))
        _write(raw / "num-node-list.csv.gz", f"{n}\n")
        _write(raw / "num-edge-list.csv.gz", f"{len(edges)}\n")
    return folder


def _expected(edges, n, inverse):
    dense = np.zeros((n, n))
    for s, d in edges:
        dense[s, d] = 1
        if inverse:
            dense[d, s] = 1
    return dense


def test_ogb_arxiv_stays_directed(tmp_path):
    _write_ogb(tmp_path / "ogbn_arxiv")
    g = load_graph(dataset="ogbn-arxiv", root=tmp_path)
    np.testing.assert_array_equal(_dense(g), _expected(EDGES, 5, inverse=False))
    assert g.source == {"dataset": "ogbn-arxiv", "root": str(tmp_path.resolve()), "symmetrize": False}


@pytest.mark.parametrize("name", ["ogbn-products", "ogbn-proteins"])
def test_ogb_inverse_edges_added_as_master_csv_says(tmp_path, name):
    _write_ogb(tmp_path / name.replace("-", "_"))
    g = load_graph(dataset=name, root=tmp_path)
    np.testing.assert_array_equal(_dense(g), _expected(EDGES, 5, inverse=True))
    assert set(g.values.tolist()) == {1.0}  # a pattern: the mirrored (1, 2)/(2, 1) pair is not 2.0


def test_ogb_papers_binary_layout(tmp_path):
    _write_ogb(tmp_path / "ogbn_papers100M", binary=True)
    g = load_graph(dataset="ogbn-papers100M", root=tmp_path)
    np.testing.assert_array_equal(_dense(g), _expected(EDGES, 5, inverse=False))


def test_ogb_id_outside_node_count(tmp_path):
    _write_ogb(tmp_path / "ogbn_arxiv", edges=np.array([[0, 7]]), n=5)
    with pytest.raises(AutosageError, match="outside"):
        load_graph(dataset="ogbn-arxiv", root=tmp_path)


def test_ogb_missing_without_ogb_says_how(tmp_path, monkeypatch):
    monkeypatch.setattr(ogb, "ogb_installed", lambda: False)
    with pytest.raises(AutosageError, match=r"pip install 'autosage\[ogb\]'.*arxiv.zip"):
        load_graph(dataset="ogbn-arxiv", root=tmp_path)


def _ogb_zip(tmp_path: Path, download_name="arxiv") -> str:
    staging = tmp_path / "staging"
    _write_ogb(staging / download_name)
    archive = tmp_path / "served" / f"{download_name}.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        for file in (staging / download_name).rglob("*"):
            zf.write(file, file.relative_to(staging).as_posix())
    return archive.resolve().as_uri()


def test_download_dataset_from_file_url(tmp_path):
    url = _ogb_zip(tmp_path)
    root = tmp_path / "root"
    folder = ogb.download_dataset(url, root, "arxiv", "ogbn_arxiv", progress=False)
    assert folder == root / "ogbn_arxiv" and (folder / "raw" / "edge.csv.gz").is_file()
    assert not (root / "arxiv.zip").exists() and not (root / "arxiv").exists()
    assert not list(root.glob(".*part"))


def test_load_downloads_missing_ogb_files_when_ogb_is_installed(tmp_path, monkeypatch):
    url = _ogb_zip(tmp_path)
    real_meta = ogb.dataset_meta
    monkeypatch.setattr(ogb, "ogb_installed", lambda: True)
    monkeypatch.setattr(ogb, "dataset_meta", lambda name, params: {**real_meta(name, params), "url": url})
    g = load_graph(dataset="ogbn-arxiv", root=tmp_path / "root")
    np.testing.assert_array_equal(_dense(g), _expected(EDGES, 5, inverse=False))
    assert (tmp_path / "root" / "ogbn_arxiv" / "raw" / "num-node-list.csv.gz").is_file()


def test_download_failure_is_one_line(tmp_path):
    with pytest.raises(AutosageError, match="download of .* failed"):
        ogb.download_dataset((tmp_path / "nope.zip").as_uri(), tmp_path / "r", "arxiv", "ogbn_arxiv", False)
    assert not list((tmp_path / "r").iterdir())


def test_zip_members_may_not_escape(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(AutosageError, match="outside"):
        ogb.extract_zip(archive, tmp_path / "into")
    assert not (tmp_path / "outside.txt").exists()


def test_installed_master_table_overrides_registry(tmp_path, monkeypatch):
    table = {"ogbn-arxiv": {"download_name": "arxiv_v2", "url": "http://x/arxiv_v2.zip",
                            "add_inverse_edge": "True", "binary": "False"}}
    asked = []
    monkeypatch.setattr(ogb, "installed_master_table", lambda task: asked.append(task) or table)
    meta = ogb.dataset_meta("ogbn-arxiv", datasets.lookup("ogbn-arxiv").params)
    assert meta == {"download_name": "arxiv_v2", "url": "http://x/arxiv_v2.zip",
                    "add_inverse_edge": True, "binary": False}
    ogb.dataset_meta("ogbl-collab", datasets.lookup("ogbl-collab").params)
    assert asked == ["nodeproppred", "linkproppred"]   # a link dataset's row is in linkproppred's table


# --- OGB link-property datasets: the same raw layout ------------------------------------------------

@pytest.mark.parametrize("name,inverse", [("ogbl-collab", True), ("ogbl-ppa", True), ("ogbl-ddi", True),
                                          ("ogbl-citation2", False), ("ogbl-wikikg2", False)])
def test_ogb_link_datasets_read_the_node_datasets_layout(tmp_path, name, inverse):
    _write_ogb(tmp_path / name.replace("-", "_"))
    g = load_graph(dataset=name, root=tmp_path)
    np.testing.assert_array_equal(_dense(g), _expected(EDGES, 5, inverse=inverse))
    assert g.source["dataset"] == name


def test_ogb_link_dataset_missing_says_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(ogb, "ogb_installed", lambda: False)
    with pytest.raises(AutosageError, match=r"ogbl-citation2: .*edge.csv.gz not found.*linkproppred/citation-v2.zip"):
        load_graph(dataset="ogbl-citation2", root=tmp_path)


# --- reddit ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("relative", ["reddit/reddit_graph.npz", "reddit/raw/reddit_graph.npz"])
def test_reddit_npz_layouts(tmp_path, relative):
    coo = sp.coo_matrix((np.array([3.0, 1.0, 1.0]), (np.array([0, 1, 2]), np.array([1, 0, 2]))), shape=(4, 4))
    (tmp_path / relative).parent.mkdir(parents=True)
    sp.save_npz(tmp_path / relative, coo)
    g = load_graph(dataset="reddit", root=tmp_path)
    assert g.shape == (4, 4) and g.nnz == 3 and set(g.values.tolist()) == {1.0}


def test_reddit_missing_names_the_download(tmp_path):
    with pytest.raises(AutosageError, match="data.dgl.ai/dataset/reddit.zip"):
        load_graph(dataset="reddit", root=tmp_path)


# --- registry and sources --------------------------------------------------------------------------

def test_every_preset_is_a_dataset_and_names_fold_case():
    from autosage_cli.graphs.synthetic import PRESETS

    assert set(PRESETS) <= set(datasets.names())
    assert datasets.lookup("CORA").name == "cora"
    assert datasets.lookup("ogbn-papers100m").name == "ogbn-papers100M"
    g = load_graph(dataset="er-200k")
    assert g.fingerprint == generate("er-200k").fingerprint
    assert g.source["generator"] == "er-200k" and g.source["seed"] == 0


def test_registry_entries_have_sources_and_licences():
    for entry in datasets.entries().values():
        assert entry.source and entry.license, entry.name
        if entry.loader == "mtx":
            assert datasets.shipped_path(entry).is_file()
        if entry.loader == "ogb":
            assert entry.params["url"].endswith(f"/{entry.params['download_name']}.zip")


def test_registry_mismatch_is_reported(tmp_path, monkeypatch):
    (tmp_path / "cora.mtx.gz").write_bytes((DATASETS_DIR / "cora.mtx.gz").read_bytes())
    doc = {"schema": 1, "datasets": {"cora": {"loader": "mtx", "file": "cora.mtx.gz", "source": "s",
                                              "license": "l", "expect": {"n": 2708, "nnz": 1}}}}
    (tmp_path / "registry.json").write_text(json.dumps(doc))
    monkeypatch.setenv("AUTOSAGE_DATASETS_DIR", str(tmp_path))
    with pytest.raises(AutosageError, match="registry expects"):
        load_graph(dataset="cora")


def test_registry_schema_mismatch(tmp_path, monkeypatch):
    (tmp_path / "registry.json").write_text(json.dumps({"schema": 99, "datasets": {}}))
    monkeypatch.setenv("AUTOSAGE_DATASETS_DIR", str(tmp_path))
    with pytest.raises(AutosageError, match="schema"):
        datasets.entries()


def test_load_source_round_trips(tmp_path):
    f = _write(tmp_path / "e.txt", "0 1\n1 2\n")
    graphs = [load_graph(path=f), load_graph(path=f, symmetrize=True), load_graph(dataset="cora"),
              generate("uniform", {"n": 100, "degree": 3}, seed=5),
              symmetrized(generate("uniform", {"n": 100, "degree": 3}, seed=5))]
    _write_ogb(tmp_path / "ogbn_products")
    graphs.append(load_graph(dataset="ogbn-products", root=tmp_path))
    for g in graphs:
        again = load_source(json.loads(json.dumps(g.source)))  # sources survive JSON
        assert again.fingerprint == g.fingerprint, g.source


@pytest.mark.parametrize("source", [{}, {"foo": 1}, "cora"])
def test_load_source_rejects_unknown_records(source):
    with pytest.raises(AutosageError):
        load_source(source)


def test_exactly_one_of_path_or_dataset():
    with pytest.raises(AutosageError, match="exactly one"):
        load_graph()
    with pytest.raises(AutosageError, match="exactly one"):
        load_graph(path="x.mtx", dataset="cora")


def test_ogb_non_integer_ids(tmp_path):
    raw = _write_ogb(tmp_path / "ogbn_arxiv") / "raw"
    _write(raw / "edge.csv.gz", "0,1\n1,x\n")
    with pytest.raises(AutosageError, match="cannot read OGB raw files"):
        load_graph(dataset="ogbn-arxiv", root=tmp_path)

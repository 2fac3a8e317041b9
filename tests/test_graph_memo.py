"""The graph memo: a remembered fingerprint is trusted only while the file (or preset) and the
readers are unchanged; a damaged memo is empty, never an error."""
import os

import pytest

from autosage_cli.graphs import memo as memo_mod
from autosage_cli.graphs.load import load_graph
from autosage_cli.graphs.memo import GraphMemo

MTX = "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 1.0\n2 3 2.0\n3 1 3.0\n"


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "g.mtx"
    path.write_text(MTX)
    return path


def test_a_file_is_recalled_with_its_fingerprint_until_it_changes(tmp_path, graph_file):
    memo = GraphMemo.beside(tmp_path / "decisions.json")
    assert memo.recall(str(graph_file), None) is None
    g = load_graph(path=str(graph_file))
    memo.remember(str(graph_file), None, g)
    got = memo.recall(str(graph_file), None)
    assert got is not None and got.fingerprint == g.fingerprint
    assert (got.n_rows, got.n_cols, got.nnz, got.source) == (3, 3, 3, dict(g.source))
    graph_file.write_text(MTX.replace("3.0", "4.0"))           # same size, new content
    os.utime(graph_file, ns=(1, 1))                             # and an mtime the memo never saw
    assert memo.recall(str(graph_file), None) is None
    assert load_graph(path=str(graph_file)).fingerprint != g.fingerprint


def test_changed_readers_invalidate_every_entry(tmp_path, graph_file, monkeypatch):
    memo = GraphMemo(tmp_path / "graphs.json")
    memo.remember(str(graph_file), None, load_graph(path=str(graph_file)))
    assert memo.recall(str(graph_file), None) is not None
    monkeypatch.setattr(memo_mod, "_readers_hash", lambda: "another reader")
    assert memo.recall(str(graph_file), None) is None


def test_synthetic_presets_are_remembered_and_downloads_are_not(tmp_path):
    memo = GraphMemo(tmp_path / "graphs.json")
    g = load_graph(dataset="cora")                 # any graph object: remember() takes what was loaded
    memo.remember(None, "er-200k", g)
    assert memo.recall(None, "er-200k").fingerprint == g.fingerprint
    memo.remember(None, "cora", g)                 # a shipped dataset is remembered by its file
    assert memo_mod.origin(None, "cora")[0].startswith("dataset:cora:")
    assert memo.recall(None, "cora").fingerprint == g.fingerprint
    assert memo_mod.origin(None, "ogbn-arxiv") is None
    assert memo_mod.origin(None, "no-such-dataset") is None


@pytest.mark.parametrize("content", ["", "{", "[]", '{"schema": "other", "entries": {}}',
                                     '{"schema": "autosage-graph-memo", "entries": {"x": 1}}'])
def test_a_damaged_or_foreign_memo_is_empty(tmp_path, graph_file, content):
    path = tmp_path / "graphs.json"
    path.write_text(content)
    memo = GraphMemo(path)
    assert memo.recall(str(graph_file), None) is None
    memo.remember(str(graph_file), None, load_graph(path=str(graph_file)))   # and is replaced
    assert memo.recall(str(graph_file), None) is not None


def test_features_are_kept_with_their_code_version_while_the_graph_is_unchanged(tmp_path, graph_file):
    memo = GraphMemo(tmp_path / "graphs.json")
    g = load_graph(path=str(graph_file))
    memo.remember(str(graph_file), None, g)
    assert memo.features(str(graph_file), None, g.fingerprint, "v1") is None      # none yet
    memo.remember(str(graph_file), None, g, features=("v1", {"nnz": 3, "locality": 0.4}))
    assert memo.features(str(graph_file), None, g.fingerprint, "v1") == {"nnz": 3, "locality": 0.4}
    assert memo.features(str(graph_file), None, g.fingerprint, "v2") is None      # other code
    assert memo.features(str(graph_file), None, "another graph", "v1") is None
    memo.remember(str(graph_file), None, g)                 # a later load keeps them
    assert memo.features(str(graph_file), None, g.fingerprint, "v1") == {"nnz": 3, "locality": 0.4}
    graph_file.write_text(MTX.replace("3.0", "4.0"))
    os.utime(graph_file, ns=(1, 1))
    changed = load_graph(path=str(graph_file))
    memo.remember(str(graph_file), None, changed)           # the new file's entry has none
    assert memo.features(str(graph_file), None, changed.fingerprint, "v1") is None


def test_ctrl_c_while_the_memo_is_written_leaves_the_old_file_and_no_temporary(tmp_path, graph_file, monkeypatch):
    memo = GraphMemo(tmp_path / "graphs.json")
    memo.remember(str(graph_file), None, load_graph(path=str(graph_file)))
    before = (tmp_path / "graphs.json").read_bytes()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(memo_mod.json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        memo.remember(None, "er-200k", load_graph(path=str(graph_file)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.mtx", "graphs.json"]
    assert (tmp_path / "graphs.json").read_bytes() == before

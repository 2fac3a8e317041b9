"""The training suites' epoch timing on the CPU: a Trainer's warm-up and timed epochs, turns that
split the timed epochs, and side_by_side, whose models' timed epochs alternate, each model's
losses its own, a failure recorded as its library's outcome while the others go on."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the training suites need it")

from autosage_cli.torch import training  # noqa: E402
from autosage_cli.torch.training_runs import Run, Trainer, alternate, turns  # noqa: E402

X = torch.zeros(3, 2)


def _recording_step(name: str, order: list):
    """make_step for a fake model: every epoch appends `name` to `order`; the loss counts epochs."""
    def make_step(model, graph, x, labels, warmup):
        count = [0]

        def step():
            order.append(name)
            count[0] += 1
            return torch.tensor(float(count[0]))
        return step
    return make_step


@pytest.mark.parametrize("n, count", [(18, 5), (5, 5), (3, 5), (1, 5), (20, 1)])
def test_turns_split_the_epochs_evenly_and_lose_none(n, count):
    chunks = turns(n, count)
    assert sum(chunks) == n and len(chunks) == min(n, count)
    assert max(chunks) - min(chunks) <= 1 and chunks == sorted(chunks, reverse=True)


def test_a_trainer_keeps_warm_up_out_of_the_timed_epochs():
    order = []
    trainer = Trainer(_recording_step("a", order), None, None, X, None, warmup=2)
    assert order == ["a", "a"] and trainer.run.times_ms == [] and trainer.run.setup_ms >= 0
    run = trainer.epochs(3)
    assert len(run.times_ms) == 3 and run.losses == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_training_train_times_what_follows_the_warm_up():
    run = training.train(_recording_step("a", []), None, None, X, None, steps=5, warmup=2)
    assert len(run.times_ms) == 3 and len(run.losses) == 5


def test_alternating_trainers_take_turns_and_a_failing_one_leaves_the_rotation():
    order, failures = [], []

    def broken(model, graph, x, labels, warmup):
        calls = [0]

        def step():
            calls[0] += 1
            order.append("b")
            if calls[0] > 2:
                raise RuntimeError("out of memory")
            return torch.tensor(0.0)
        return step

    trainers = {name: Trainer(make, None, None, X, None, warmup=0)
                for name, make in (("a", _recording_step("a", order)), ("b", broken),
                                   ("c", _recording_step("c", order)))}
    alternate(trainers, 6, lambda key, exc: failures.append((key, str(exc))))
    # turns of 2, 1, 1, 1, 1 epochs: a a b b c c, then b fails in its second turn
    assert order[:6] == ["a", "a", "b", "b", "c", "c"]
    assert order[6:] == ["a", "b", "c", "a", "c", "a", "c", "a", "c"]
    assert failures == [("b", "out of memory")]
    assert len(trainers["a"].run.times_ms) == len(trainers["c"].run.times_ms) == 6


def _tiny_graph():
    from autosage_cli.torch.graph import Graph

    row = torch.tensor([0, 1, 1, 2, 3, 4, 5, 5])
    col = torch.tensor([1, 0, 2, 1, 5, 3, 4, 0])
    return Graph.from_coo(row, col, None, (6, 6))


def test_side_by_side_trains_each_model_as_it_would_alone_in_turns():
    """Ours eager and PyG's two eager modes in turns: each Run has its timed epochs and the losses
    of its own model's sequence, the same as that model trained alone."""
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    g = _tiny_graph()
    x, labels = torch.randn(6, 5, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1, 2])
    inputs = training.pyg_inputs(g)
    torch.manual_seed(0)
    import torch_geometric.nn as pyg

    init = training.build(pyg, "sage", 5, 3).state_dict()
    ours, theirs = training.run_side_by_side("sage", (5, 3), g, inputs, x, labels, init, steps=6, warmup=2,
                                             modes=("graph",))
    assert list(ours) == ["graph"] and [r.mode for r in theirs] == list(training.PYG_MODES["sage"])
    for run in (ours["graph"], *theirs):
        assert run.status == "ok" and len(run.times_ms) == 4 and len(run.losses) == 6
    alone = training.run_ours("sage", (5, 3), g, x, labels, init, 6, 2)
    assert alone.losses == pytest.approx(ours["graph"].losses, rel=1e-5)
    assert theirs[0].losses == pytest.approx(ours["graph"].losses, rel=1e-4)


def test_side_by_side_records_a_library_failure_and_propagates_anything_else():
    order = []

    def failing_make():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    entries = [(Run("autosage", "graph"), _recording_step("ours", order), lambda: (None, None)),
               (Run("pyg", "edge-index"), _recording_step("pyg", order), failing_make)]
    ours, pyg = training.side_by_side(entries, X, None, steps=4, warmup=1)
    assert ours.status == "ok" and len(ours.times_ms) == 3
    assert pyg.status == "skipped" and "out of GPU memory (asked for 2.00 GiB)" in pyg.error

    def bug():
        raise TypeError("a bug in the harness, not a mode PyG cannot run")

    with pytest.raises(TypeError):
        training.side_by_side([(Run("pyg", "edge-index"), _recording_step("pyg", []), bug)], X, None, 4, 1)


def test_pyg_compiled_falls_back_to_the_next_fastest_eager_mode_that_compiles(monkeypatch):
    """torch.compile of PyG's fastest eager mode fails: the compiled row is its next mode's, not a
    skipped row; when every mode fails, one skipped row with each reason, fastest first."""
    eager = [Run("pyg", "sparse-csr", times_ms=[3.0]), Run("pyg", "edge-index", times_ms=[2.0]),
             Run("pyg", "broken", status="skipped", error="no")]
    tried = []

    def fake(model_name, dims, inputs, run, *args, mode="compiled"):
        tried.append(run.mode)
        if run.mode == "edge-index":
            return Run("pyg", mode, status="skipped", error="torch.compile (edge-index): IndexError")
        return Run("pyg", mode, times_ms=[1.5])

    monkeypatch.setattr(training, "run_pyg_compiled", fake)
    run = training.run_pyg_compiled_fastest("gcn", (4, 3), {}, eager, X, None, {}, 4, 1, mode="compiled")
    assert tried == ["edge-index", "sparse-csr"] and run.status == "ok" and run.mode == "compiled"

    tried.clear()
    monkeypatch.setattr(training, "run_pyg_compiled",
                        lambda m, d, i, run, *a, mode="compiled": Run("pyg", mode, status="skipped", error=f"{run.mode} failed"))
    run = training.run_pyg_compiled_fastest("gcn", (4, 3), {}, eager, X, None, {}, 4, 1, mode="reduce-overhead")
    assert run.status == "skipped" and run.mode == "reduce-overhead"
    assert run.error == "edge-index failed; sparse-csr failed"


def test_a_run_out_of_memory_beside_others_trains_again_alone(monkeypatch):
    """A trainer that runs out of memory while another model is resident gets a second run alone;
    one that runs out of memory alone stays a skipped row (no endless retry)."""
    resident = {"ours": False}

    def ours_step(model, graph, x, labels, warmup):
        resident["ours"] = True
        return lambda: torch.tensor(1.0)

    def greedy_step(model, graph, x, labels, warmup):
        def step():
            if resident["ours"]:
                raise RuntimeError("CUDA out of memory. Tried to allocate 40.00 GiB")
            return torch.tensor(2.0)
        return step

    def make_ours():
        resident["ours"] = False       # a fresh rotation: nothing of ours held yet
        return None, None

    entries = [(Run("autosage", "graph"), ours_step, make_ours),
               (Run("pyg", "sparse-csr"), greedy_step, lambda: (None, None))]
    monkeypatch.setattr(training, "free_memory", lambda: resident.update(ours=False))   # our model freed
    ours, pyg = training.side_by_side(entries, X, None, steps=5, warmup=1)
    assert ours.status == "ok" and len(ours.times_ms) == 4
    assert pyg.status == "ok" and len(pyg.times_ms) == 4 and pyg.losses == [2.0] * 5

    def always_oom(model, graph, x, labels, warmup):
        raise RuntimeError("CUDA out of memory. Tried to allocate 400.00 GiB")

    (alone,) = training.side_by_side([(Run("pyg", "edge-index"), always_oom, lambda: (None, None))], X, None, 5, 1)
    assert alone.status == "skipped" and "asked for 400.00 GiB" in alone.error

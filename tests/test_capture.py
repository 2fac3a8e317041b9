"""autosage_cli.torch.capture on the CPU: the rules that need no device (the optimizer must be
capturable, warm-up steps, a callable), the watch a replay keeps on its Graphs and, without a
GPU, the one-line error naming the missing GPU. tests/test_capture_gpu.py captures and replays on a device."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.torch import capture  # noqa: E402

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU: the no-GPU error cannot show")


def _setup(**adam):
    g = at.Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)
    model = at.GCNConv(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, **adam)
    loss_fn = lambda graph, x: model(x, graph).square().mean()  # noqa: E731
    return loss_fn, opt, g, torch.randn(3, 4)


def _one_line(info) -> str:
    text = str(info.value)
    assert "\n" not in text
    return text


@no_gpu
def test_capturing_a_training_step_without_a_gpu_names_the_missing_gpu():
    loss_fn, opt, g, x = _setup(capturable=True)
    with pytest.raises(AutosageError, match="capturing the training step needs a CUDA GPU: torch sees none") as info:
        at.capture_training_step(loss_fn, opt, g, x)
    _one_line(info)


@no_gpu
def test_capturing_inference_without_a_gpu_names_the_missing_gpu():
    _, _, g, x = _setup()
    with pytest.raises(AutosageError, match="capturing the forward pass needs a CUDA GPU") as info:
        at.capture_inference(lambda graph, x: at.spmm(graph, x), g, x)
    _one_line(info)


@pytest.mark.parametrize("make, message", [
    (lambda p: torch.optim.Adam(p), r"Adam is not capturable: build it with capturable=True"),
    (lambda p: torch.optim.AdamW(p, capturable=False), r"AdamW is not capturable"),
    (lambda p: torch.optim.LBFGS(p), r"LBFGS cannot run inside a CUDA graph: use SGD, or Adam / AdamW"),
])
def test_a_non_capturable_optimizer_is_refused_with_the_fix(make, message):
    loss_fn, _, g, x = _setup()
    with pytest.raises(AutosageError, match=message) as info:
        at.capture_training_step(loss_fn, make([torch.nn.Parameter(torch.ones(2))]), g, x)
    _one_line(info)


def test_capturable_optimizers_pass_the_check():
    params = [torch.nn.Parameter(torch.ones(2))]
    for opt in (torch.optim.Adam(params, capturable=True), torch.optim.AdamW(params, capturable=True),
                torch.optim.SGD(params, lr=0.1, momentum=0.9)):
        capture.check_optimizer(opt)
    group = torch.optim.Adam(params, capturable=True)
    group.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "capturable": False})
    with pytest.raises(AutosageError, match="not capturable"):
        capture.check_optimizer(group)


@pytest.mark.parametrize("warmup", [0, -1, 1.5, True])
def test_warmup_must_be_at_least_one_eager_step(warmup):
    loss_fn, opt, g, x = _setup(capturable=True)
    with pytest.raises(AutosageError, match="warmup must be an int >= 1"):
        at.capture_training_step(loss_fn, opt, g, x, warmup=warmup)


def test_the_step_must_be_a_function():
    _, opt, g, x = _setup(capturable=True)
    with pytest.raises(AutosageError, match="expected a function of \\(graph, \\*inputs\\)"):
        at.capture_training_step("loss", opt, g, x)


def test_capturable_plans_reach_autograds_device_thread():
    """autograd runs a CUDA backward on its own thread: the capturable mode must be seen there, or
    the captured backward meets vendor plans (CuPy refuses their cuSPARSE calls in a capture)."""
    import threading

    from autosage_cli.torch import cuda

    seen = []
    with cuda.capturable_plans():
        worker = threading.Thread(target=lambda: seen.append(cuda._CAPTURABLE[0] > 0))
        worker.start()
        worker.join()
    assert seen == [True] and cuda._CAPTURABLE[0] == 0


def _vendor_plan_on(g, k: int):
    """g's SpMM plan at width k replaced by a stand-in cuSPARSE plan (what the tuner picks where
    cuSPARSE wins), under the key cuda.plan looks up."""
    from types import SimpleNamespace

    from autosage_cli.torch import cuda

    key = cuda.plan_key("spmm", k, torch.device("cuda", 0), 1, None, g.weight is not None, "float32")
    g.gpu[key] = SimpleNamespace(backend="cusparse", schedule="cusparse.csr_alg2")


def test_a_vendor_plan_met_in_a_capture_nobody_prepared_names_the_fix(monkeypatch):
    """torch.compile's reduce-overhead mode or a user's torch.cuda.graph records after a warm-up
    that made cuSPARSE plans: one line naming the op and capturable_plans, not CuPy's own
    refusal."""
    from autosage_cli.torch import cuda

    g = at.Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)
    _vendor_plan_on(g, 16)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(AutosageError, match=r"spmm at width 16 .* cusparse\.csr_alg2 .*capturable_plans") as info:
        cuda.plan(g, "spmm", 16, torch.device("cuda", 0), weighted=True)
    _one_line(info)


def test_a_vendor_plan_runs_where_no_capture_is_recording(monkeypatch):
    from autosage_cli.torch import cuda

    g = at.Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)
    _vendor_plan_on(g, 16)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert cuda.plan(g, "spmm", 16, torch.device("cuda", 0), weighted=True).backend == "cusparse"


def test_capturable_plans_is_public():
    assert at.capturable_plans is capture.cuda.capturable_plans and "capturable_plans" in at.__all__


def _watched_graphs(n=3):
    graphs = []
    for i in range(n):
        g = at.Graph.from_edge_index(torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]]) + i % 2, num_nodes=4)
        g.gpu[("plan", "spmm", 16)] = object()
        g.gpu[("device", "cuda:0")] = object()
        graphs.append(g)
    return graphs


def test_a_replays_watch_sees_nothing_while_the_graphs_stay_as_captured():
    graphs = _watched_graphs()
    watch = capture._Watch(graphs)
    assert watch.graphs() == tuple(graphs)
    graphs[1].gpu[("plan", "spmm", 64)] = object()         # a new width's plan, run eagerly: fine
    graphs[2].gpu[("device", "cuda:0")] = object()         # not a plan
    assert watch.first_changed(watch.graphs()) is None


@pytest.mark.parametrize("change", ["in place", "new tensor", "replaced plan", "dropped plan"])
def test_a_replays_watch_names_the_graph_that_changed(change):
    graphs = _watched_graphs()
    watch = capture._Watch(graphs)
    g = graphs[1]
    if change == "in place":
        g.col.add_(0)                                      # same values, a new version
    elif change == "new tensor":
        g.rowptr = g.rowptr.clone()
    elif change == "replaced plan":
        g.gpu[("plan", "spmm", 16)] = object()
    else:
        del g.gpu[("plan", "spmm", 16)]
    assert watch.first_changed(watch.graphs()) is g


def test_a_replays_watch_sees_a_freed_graph():
    graphs = _watched_graphs()
    watch = capture._Watch(graphs)
    del graphs[0]
    import gc
    gc.collect()
    assert watch.graphs()[0] is None and watch.graphs()[1] is graphs[0]

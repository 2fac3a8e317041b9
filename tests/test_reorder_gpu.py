"""`autosage reorder --measure` on a device: both orders tuned and timed, the reordered SpMM equal
to the original one permuted. Asserts that the measurement is sound, not that reordering wins:
whether it does is what these runs are for."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autosage_cli.bench.reorder_gain import measure_gain
from autosage_cli.bench import reordering
from autosage_cli.graphs import reorder
from autosage_cli.graphs.synthetic import generate
from cli_helpers import run_cli

pytestmark = pytest.mark.gpu
CORA = str(Path(__file__).resolve().parent.parent / "datasets" / "cora.mtx.gz")


@pytest.mark.parametrize("method", ["rcm", "hubsort"])
def test_measure_through_the_cli(tmp_path, method):
    result = run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), "--method", method, "--measure",
                     "--width", "32", "--cache", str(tmp_path / "decisions.json"), "--json")
    assert result.exit_code == 0, result.stderr
    gain = json.loads(result.stdout)["measure"]
    assert gain["width"] == 32 and gain["verified"] is True, gain
    assert gain["rel_error"] <= gain["tolerance"]
    for label in ("before", "after"):
        t = gain[label]
        assert t["median_ms"] > 0 and t["p20_ms"] <= t["median_ms"] <= t["p80_ms"] and t["repeats"] >= 3
        assert t["backend"] and t["schedule"]
    assert gain["speedup"] == pytest.approx(gain["before"]["median_ms"] / gain["after"]["median_ms"])
    assert (tmp_path / "decisions.json").is_file()       # both orders' decisions were tuned and stored
    table = run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), "--method", method, "--measure",
                    "--width", "32", "--cache", str(tmp_path / "decisions.json"))
    assert table.exit_code == 0 and "gain: " in table.stdout and "(verified" in table.stdout


def test_measure_gain_on_a_shuffled_band(tmp_path):
    """A band whose ids were shuffled, before and after RCM: the case reordering should help most."""
    graph = generate("banded", {"n": 500_000, "bandwidth": 8, "shuffle": 1})
    reordered, perm, _ = reordering.reorder(graph, "rcm")
    gain = measure_gain(graph, reordered, perm, 64, cache=str(tmp_path / "decisions.json"))
    assert gain.verified, gain
    assert math.isfinite(gain.speedup) and gain.speedup > 0
    print(f"shuffled band n=500k K=64: {gain.before.median_ms:.3f} ms -> {gain.after.median_ms:.3f} ms "
          f"({gain.speedup:.2f}x)")

"""The training suites' node data: a shuffled preset trains on its original's feature widths and
classes, so its epochs compare with the original order's."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="torch is not installed: the training suites need it")

from autosage_cli.torch import training_data  # noqa: E402


def test_a_shuffled_preset_has_its_originals_features_and_classes():
    assert training_data.feature_dims("products-like-shuffled") == training_data.FEATURES["products-like"] == (100, 47)
    assert training_data.feature_dims("reddit-like") == (602, 41)
    assert training_data.feature_dims("cora") == training_data.OTHER_FEATURES
    assert training_data.feature_dims("cora-shuffled") == training_data.OTHER_FEATURES


def test_random_data_takes_the_graphs_widths():
    x, labels = training_data.random_data("products-like-shuffled", 5, "cpu", 0)
    assert tuple(x.shape) == (5, 100) and int(labels.max()) < 47

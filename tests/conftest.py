"""Shared fixtures. GPU tests carry the `gpu` marker and skip, with the reason, only when no CUDA
device is visible."""
from __future__ import annotations

import pytest

from autosage_cli.capability import gpu_status


def pytest_collection_modifyitems(config, items):
    ok, reason = gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no CUDA device visible: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

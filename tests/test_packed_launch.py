"""Packed kernel launches (backends/packed.py), with the driver call faked: every fixed argument
lands in its 8-byte slot as the device would read it, the per-call pointers are written at each
launch, kernelParams points at the slots, and what cannot be packed is refused (the plan keeps its
CuPy launch)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

driver = pytest.importorskip("cupy_backends.cuda.api.driver", reason="CuPy is not installed")

from autosage_cli.backends import packed  # noqa: E402


class FakeFunction:
    ptr = 0xF00


class FakeArray:
    """What a CuPy array shows a packer: data.ptr."""
    def __init__(self, ptr):
        self.data = type("Mem", (), {"ptr": ptr})()


@pytest.fixture
def launches(monkeypatch):
    seen = []

    def fake_launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        # read the parameter block now, as the driver copies it at the call
        n = 7
        pointers = (ctypes.c_void_p * n).from_address(params)
        raw = [ctypes.string_at(pointers[i], 8) for i in range(n)]
        seen.append({"fn": fn, "grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared,
                     "stream": stream, "extra": extra, "raw": raw})
    monkeypatch.setattr(driver, "launchKernel", fake_launch)
    return seen


def test_fixed_arguments_and_per_call_pointers_land_in_their_slots(launches):
    array = FakeArray(0x7000_0000_1234)
    launch = packed.PackedLaunch(FakeFunction(), (5, 1, 1), (256, 1, 1),
                                 (np.int32(-3), np.int64(1 << 40), np.float32(1.5), array,
                                  packed.Slot("B"), np.uint64(0),
                                  packed.Slot("out")))
    launch.launch(99, {"B": 0xB0B, "out": 0xC0C})
    launch.launch(98, {"B": 0xB1B, "out": 0xC1C})
    first, second = launches
    assert first["fn"] == 0xF00 and first["grid"] == (5, 1, 1) and first["block"] == (256, 1, 1)
    assert first["stream"] == 99 and second["stream"] == 98 and first["shared"] == 0 and first["extra"] == 0
    raw = first["raw"]
    assert np.frombuffer(raw[0][:4], np.int32)[0] == -3
    assert np.frombuffer(raw[1], np.int64)[0] == 1 << 40
    assert np.frombuffer(raw[2][:4], np.float32)[0] == 1.5
    assert int.from_bytes(raw[3], "little") == 0x7000_0000_1234
    assert int.from_bytes(raw[4], "little") == 0xB0B and int.from_bytes(raw[6], "little") == 0xC0C
    assert int.from_bytes(raw[5], "little") == 0
    assert int.from_bytes(second["raw"][4], "little") == 0xB1B
    assert int.from_bytes(second["raw"][6], "little") == 0xC1C


def test_a_raw_kernel_launches_its_function():
    class Raw:
        kernel = FakeFunction()
    assert packed.PackedLaunch(Raw(), (1, 1, 1), (32, 1, 1), ()).function == 0xF00


def test_a_launch_now_takes_ints_as_addresses_and_scalars_as_their_bytes(launches):
    from autosage_cli.kernels import launch

    launch.launch_now(FakeFunction(), (3, 1, 1), (64, 1, 1), 7,
                      (0xABC, 0, np.float32(-2.0), np.int64(5), np.int32(9), 1 << 63, FakeArray(0xD0D)))
    (seen,) = launches
    raw = seen["raw"]
    assert seen["fn"] == 0xF00 and seen["grid"] == (3, 1, 1) and seen["stream"] == 7
    assert int.from_bytes(raw[0], "little") == 0xABC and int.from_bytes(raw[1], "little") == 0
    assert np.frombuffer(raw[2][:4], np.float32)[0] == -2.0 and np.frombuffer(raw[3], np.int64)[0] == 5
    assert np.frombuffer(raw[4][:4], np.int32)[0] == 9 and int.from_bytes(raw[5], "little") == 1 << 63
    assert int.from_bytes(raw[6], "little") == 0xD0D
    with pytest.raises(TypeError):
        launch.launch_now(FakeFunction(), (1, 1, 1), (1, 1, 1), 0, (-1,))


@pytest.mark.parametrize("arg", [3, 2.5, "x", np.complex128(1j)], ids=["int", "float", "str", "16-byte"])
def test_what_cannot_be_packed_keeps_the_cupy_launch(arg):
    assert packed.pack_all([(FakeFunction(), (1, 1, 1), (1, 1, 1), (arg,))]) is None
    assert packed.pack_all([(FakeFunction(), (1, 1, 1), (1, 1, 1), (np.int32(1),))]) is not None

"""nvmath-python's cuSPARSE binding is imported without nvmath's package initialisation (which
loads five other CUDA libraries), and the package is left to initialise normally later."""
from __future__ import annotations

import sys
import textwrap

import pytest

from autosage_cli.backends import sddmm_providers


@pytest.fixture
def fake_nvmath(tmp_path, monkeypatch):
    """A package shaped like nvmath whose package modules fail if they run."""
    root = tmp_path / "nvmath"
    (root / "bindings").mkdir(parents=True)
    (root / "__init__.py").write_text("raise RuntimeError('nvmath/__init__ ran')\n")
    (root / "bindings" / "__init__.py").write_text("raise RuntimeError('nvmath/bindings/__init__ ran')\n")
    (root / "bindings" / "cusparse.py").write_text(textwrap.dedent("""
        from . import helper          # relative imports inside the package still resolve
        SDDMM = helper.VALUE
    """))
    (root / "bindings" / "helper.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "nvmath" or m.startswith("nvmath.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m == "nvmath" or m.startswith("nvmath.")]:
        del sys.modules[name]


def test_the_binding_imports_without_the_package_initialisation(fake_nvmath):
    binding = sddmm_providers.nvmath_cusparse()
    assert binding.SDDMM == 7 and binding.__name__ == "nvmath.bindings.cusparse"
    # the stand-in package modules are gone: a later `import nvmath` runs the real initialisation
    assert "nvmath" not in sys.modules and "nvmath.bindings" not in sys.modules
    with pytest.raises(RuntimeError, match="nvmath/__init__ ran"):
        import nvmath  # noqa: F401
    assert sddmm_providers.nvmath_cusparse() is binding       # imported once


def test_an_imported_nvmath_is_used_as_it_is(fake_nvmath, monkeypatch):
    import types

    real, bindings, cusparse = (types.ModuleType(n) for n in ("nvmath", "nvmath.bindings", "nvmath.bindings.cusparse"))
    real.bindings, bindings.cusparse = bindings, cusparse
    for module in (real, bindings, cusparse):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    assert sddmm_providers.nvmath_cusparse() is cusparse


def test_without_nvmath_the_import_error_names_it(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    monkeypatch.delitem(sys.modules, "nvmath", raising=False)
    with pytest.raises(ImportError, match="nvmath-python is not installed"):
        sddmm_providers.nvmath_cusparse()

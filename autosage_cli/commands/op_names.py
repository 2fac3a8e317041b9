"""The op options' type: their choices are the op registry's names (ops/), read when the help is
shown or a shell completes, so an op the registry gains is offered by every command without a
change here. The value is passed on as given: each command checks it against the registry and says
which ops exist in its own one-line error."""
from __future__ import annotations

import click

from .. import ops as op_specs


class OpNames(click.ParamType):
    """One op (`listed=False`) or a comma-separated list of ops."""
    name = "op"

    def __init__(self, listed: bool = False):
        self.listed = listed

    def get_metavar(self, param, ctx=None) -> str:
        choices = "|".join(op_specs.names())
        return f"[{choices}][,...]" if self.listed else f"[{choices}]"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        done, _, last = incomplete.rpartition(",")
        prefix = f"{done}," if done else ""
        return [CompletionItem(prefix + name) for name in op_specs.names() if name.startswith(last)]

"""The `autosage` command: a click group. Commands live in autosage_cli/commands/, one module each;
they parse options, call the library and render. No logic here.

Every user-facing failure ends as one line `Error: ...` on stderr: exit code 2 for bad input (click
usage errors included), 3 when memory ran out, 4 for a CUDA fault (errors.py lists the codes). An
unexpected exception prints one line too, exit code 1, with the traceback only under AUTOSAGE_DEBUG=1.
"""
from __future__ import annotations

import os
import sys

import click

from .commands import bench, compile as compile_kernels, gen, info, inspect, plot, reorder, replay, tune
from .errors import AutosageError, resource_error


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="autosage")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """autosage: input-aware SpMM / SDDMM / CSR-attention scheduling for NVIDIA GPUs."""
    if ctx.invoked_subcommand is None:      # plain `autosage`: the help, and success
        click.echo(ctx.get_help())


for _module in (info, inspect, gen, reorder, tune, compile_kernels, replay, bench, plot):
    cli.add_command(_module.command)


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="autosage", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:   # click turns Ctrl-C (KeyboardInterrupt) into Abort
        cause = exc.__cause__ or exc.__context__
        interrupted = isinstance(cause, KeyboardInterrupt)
        click.echo(f"Error: {'interrupted' if interrupted else 'aborted'}", err=True)
        sys.exit(130)
    except click.ClickException as exc:  # usage errors, bad option values, missing paths
        click.echo(f"Error: {_one_line(exc.format_message())}", err=True)
        sys.exit(2)
    except AutosageError as exc:
        click.echo(f"Error: {_one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # out of memory, a CUDA fault, or a bug: one line, traceback on request
        if os.environ.get("AUTOSAGE_DEBUG"):
            raise
        known = resource_error(exc)
        if known is not None:
            click.echo(f"Error: {_one_line(str(known))}", err=True)
            sys.exit(known.exit_code)
        click.echo(f"Error: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
                   "(set AUTOSAGE_DEBUG=1 for the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

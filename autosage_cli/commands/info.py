"""`autosage info [--json]`: the environment results and cache keys record — GPU, driver, CUDA
runtime, CuPy and cuSPARSE versions, commit — or plainly "no CUDA device visible"; and where
compiled kernels are cached and how many are there, and the kernels built at install time."""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..environment import environment
from ..kernels import cubins
from ..kernels.aot import cache_stats


@click.command("info")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def command(as_json):
    """Show the GPU and software autosage would run with."""
    env = environment()
    kernels, built = cache_stats(), cubins.status()
    if as_json:
        click.echo(json.dumps({**env, "kernel_cache": kernels.to_dict(), "prebuilt_kernels": built}))
        return
    console = Console()
    device = env["device"]
    if device is None:
        reason = env["gpu_status"]
        console.print(reason if reason.startswith("no CUDA device visible")
                      else f"no CUDA device visible ({reason})")
    table = Table(show_header=False)
    table.add_column("item")
    table.add_column("value")
    if device is not None:
        table.add_row("GPU", device["name"])
        table.add_row("compute capability", device["compute_capability"])
        table.add_row("SMs", str(device["sms"]))
        table.add_row("memory", f"{device['memory_bytes'] / 2**30:.1f} GiB")
        table.add_row("L2 cache", f"{device['l2_bytes'] / 2**20:.0f} MiB")
    for key, value in env["software"].items():
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    table.add_row("kernel cache", f"{kernels.path} ({kernels.kernels} compiled kernels, "
                                  f"{kernels.bytes / 2**20:.1f} MiB)")
    table.add_row("prebuilt kernels", prebuilt_line(built))
    table.add_row("commit", env["commit"])
    table.add_row("host", env["hostname"])
    console.print(table)


def prebuilt_line(built: dict) -> str:
    """'PATH (72 modules, 878 kernels for sm_90)', or why a tune compiles instead."""
    if not built["modules"]:
        return f"{built['path']} (none: nvcc was not found at install; kernels compile on first use)"
    archs = ", ".join(f"sm_{a}" for a in built["archs"])
    stale = "" if built["current"] else "; stale: cuda/ changed since, kernels compile on first use"
    return f"{built['path']} ({built['modules']} modules, {built['kernels']} kernels for {archs}{stale})"

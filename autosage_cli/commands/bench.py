"""`autosage bench`: run a benchmark suite side by side against the vendor libraries and write a
results directory (results.csv, results.json, PNG plots, README.md).

Options are validated before anything heavy (and before the GPU check), so a typo fails in one line
with exit 2. Rows are written to results.csv after every case, and the run directory is completed
even when the run is interrupted (Ctrl-C or SIGTERM from `timeout`), marked as partial.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import shlex
import shutil
import signal
import time
from pathlib import Path

import click

from .. import dtypes, ops as op_specs
from ..capability import require_gpu
from ..environment import now_iso
from ..errors import AutosageError
from ..bench import suites
from .op_names import OpNames
from .progress import StderrBar
from .reorder import device_labeller
from ..cache import check_cache_path
from ..paths import check_creatable
# The benchmark's harness, toolkit, report and planners are imported by the command when it runs:
# every `autosage` invocation imports this module to list the command, and a tune need not pay
# for them.


def parse_int_list(text: str | None, what: str, minimum: int = 1) -> tuple[int, ...]:
    """"1,2,4" -> (1, 2, 4); duplicates dropped, order kept; anything else is an AutosageError."""
    if text is None:
        return ()
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise AutosageError(f"{what} must be a comma-separated list of integers, got {text!r}") from None
        if value < minimum:
            raise AutosageError(f"{what} must be >= {minimum}, got {value}")
        if value not in values:
            values.append(value)
    return tuple(values)


def parse_ops(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    ops = tuple(dict.fromkeys(p.strip() for p in text.split(",")))
    for op in ops:
        if op not in op_specs.names():
            raise AutosageError(f"unknown op {op!r} in --ops; choose from {', '.join(op_specs.names())}")
        borrowed = op_specs.get(op).schedules_of
        if borrowed is not None:   # its plans are not the schedules' own op's, which the bench prepares
            raise AutosageError(f"--ops {op}: the benchmark does not run it yet (it runs {borrowed} "
                                f"schedules with kernels of its own); tune it with autosage tune --op {op}")
    return ops


def check_writable(path: Path, option: str = "--out") -> None:
    """Fail now, not after minutes of GPU work, if `path` cannot become a writable directory."""
    if path.exists() and not path.is_dir():
        raise AutosageError(f"{option} {path} exists and is not a directory")
    check_creatable(path, option)


def make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AutosageError(f"cannot create --out {path}: {exc.strerror or exc}") from None


def gpu_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", (name or "gpu").lower()).strip("-") or "gpu"


def default_out(gpu: str) -> Path:
    return Path("results") / f"{_dt.date.today().isoformat()}-{gpu_slug(gpu)}"


class _Terminated(KeyboardInterrupt):
    """SIGTERM (e.g. from `timeout`), turned into an interrupt so the run directory gets written."""


def _on_sigterm(signum, frame):
    raise _Terminated()


class SuiteProgress(StderrBar):
    """Progress on stderr: a rich bar on a terminal; one line per case otherwise (logs of a batch
    run then show how far it got, what each case gave and how long it took)."""

    def __init__(self, total: int):
        from ..bench.harness import Listener

        super().__init__(total, "bench")
        self.total, self.done, self.label, self.t0 = total, 0, "", time.perf_counter()
        self.listener = Listener(on_graph=self._on_graph, on_case=self._on_case)

    def _say(self, text: str) -> None:
        if self.bar:
            self.bar.update(self.task, description=text)
        else:
            click.echo(text, err=True)

    def _on_graph(self, work) -> None:
        self._say(f"{work.spec.label}: loading")

    def _on_case(self, work, case) -> None:
        self.label, self.t_case = f"{work.spec.label} {case.describe()}", time.perf_counter()
        if self.bar:
            self._say(self.label)

    def case_done(self, rows) -> None:
        self.done += 1
        if self.bar:
            self.bar.advance(self.task)
            return
        from ..bench import report

        main = next((r for r in rows if report.is_main(r)), None)
        result = (f"autosage {main.speedup_vs_best_vendor:.2f}x vs {main.best_vendor or 'no vendor'}"
                  f" [{main.status}]" if main else "no autosage row")
        click.echo(f"[{self.done}/{self.total}] {self.label}: {result} "
                   f"({time.perf_counter() - self.t_case:.1f} s, {time.perf_counter() - self.t0:.0f} s total)",
                   err=True)


@click.command("bench")
@click.option("--dataset", "datasets", multiple=True, metavar="NAME|PATH",
              help="Graph(s) to run instead of the suite's: a preset, a dataset name or a file. Repeatable.")
@click.option("--suite", default="default", show_default=True,
              help=f"Which suite: {', '.join(suites.SUITE_NAMES)}.")
@click.option("--ops", default=None, type=OpNames(listed=True),
              help="Comma-separated ops; for --suite training, models (train-gcn,train-sage,train-gat,"
                   "train-transformer); for --suite minibatch, models (minibatch-sage,minibatch-gcn,"
                   "minibatch-gat).")
@click.option("--widths", default=None, help="Comma-separated K (d for attention), e.g. 1,2,4,32.")
@click.option("--heads", default=None, help="Comma-separated attention head counts, e.g. 1,8.")
@click.option("--dtypes", "dtype_list", default=None,
              help="Comma-separated element types, each a case of its own (default: float32; "
                   "supported: " + ", ".join(op_specs.supported_dtypes()) + ").")
@click.option("--repeat", type=int, default=None, help="Timed repeats per measurement (median, p20, p80 reported; use >= 10). "
                   "Default: the suite's (20 for default, 10 for the big suites). --suite training: "
                   "epochs per model, the first 2 untimed (default 10).")
@click.option("--steps", type=int, default=None,
              help="--suite minibatch: training steps per model and library, one sampled batch each, "
                   "the first 5 not in the median (default 50).")
@click.option("--batch-size", type=int, default=None,
              help="--suite minibatch: seed nodes per batch (default 1024).")
@click.option("--fanouts", default=None,
              help="--suite minibatch: neighbours drawn per node and hop, comma-separated (default 15,10,5).")
@click.option("--modes", default=None,
              help="--suite training: our modes, comma-separated, of graph (eager), captured, compiled, "
                   "reduce-overhead (default all); PyG's eager modes always run, its compiled ones "
                   "where ours do.")
@click.option("--flush-l2", is_flag=True, help="Flush the L2 cache between timed repeats.")
@click.option("--oracle", is_flag=True,
              help="Also tune with a full-graph probe of the top k (tune --full; not exhaustive) and "
                   "report whether the choice agrees with it.")
@click.option("--all-schedules", is_flag=True,
              help="Also time every supported native schedule, each with the run's repeats.")
@click.option("--exhaustive", is_flag=True,
              help="Time every supported native schedule of every op on the full graph (screened: one "
                   "launch each, contenders in full) and report the choice against the exhaustive best.")
@click.option("--cache", "cache_path", default=None, metavar="FILE", help="Decision cache file.")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Results directory (default results/<date>-<gpu>/); an existing one is merged into.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed for presets and inputs.")
@click.option("--root", default="datasets", show_default=True,
              help="Where downloaded datasets (OGB, reddit) live.")
@click.option("--top-k", type=int, default=None, help="Schedules the scheduler probes.")
@click.option("--budget-ms", type=float, default=None, help="Probe time budget per tune (ms).")
@click.option("--guardrail", type=float, default=None, help="Choose native only if <= G x best vendor.")
@click.option("--dry-run", is_flag=True,
              help="Validate the options, graphs and output paths and list the cases with their "
                   "estimated memory; no GPU needed.")
@click.option("--reorder", "reorder", default=None, metavar="METHOD[,METHOD]",
              help="Also run every case on each graph renumbered by these methods (autosage reorder's; "
                   "the reorder column); with --suite training, each model once more on each order, "
                   "and `auto` for the scheduler's decision over a 100-epoch run.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def command(datasets, suite, ops, widths, heads, dtype_list, repeat, steps, batch_size, fanouts, modes, flush_l2, oracle,
            all_schedules, exhaustive, cache_path, out_dir, seed, root, top_k, budget_ms, guardrail, reorder,
            dry_run, as_json):
    """Benchmark autosage against cuSPARSE (and torch / PyG) side by side."""
    from ..bench import report, toolkit as toolkit_mod
    from ..bench.harness import RunOptions, count_cases, make_context, run_suite
    from . import bench_minibatch, bench_plan, bench_training, dry_run as dry_run_mod

    methods = _suite_flags(suite, steps, batch_size, fanouts, reorder, modes)
    if suite in (suites.TRAINING, suites.MINIBATCH):
        ctx = click.get_current_context()
        module = bench_training if suite == suites.TRAINING else bench_minibatch
        return module.run(ctx.params, _command_line(ctx), default_out, _prior_run, _render)
    chosen = suites.get_suite(suite)
    if repeat is not None and repeat < 1:
        raise AutosageError(f"--repeat must be >= 1, got {repeat}")
    if top_k is not None and top_k < 1:
        raise AutosageError(f"--top-k must be >= 1, got {top_k}")
    if budget_ms is not None and not budget_ms > 0:
        raise AutosageError(f"--budget-ms must be > 0, got {budget_ms}")
    if guardrail is not None and not 0 < guardrail <= 1:
        raise AutosageError(f"--guardrail must be in (0, 1], got {guardrail}")
    chosen = suites.with_overrides(chosen, repeat, all_schedules)
    work = suites.build_work(chosen, tuple(datasets), parse_ops(ops),
                             parse_int_list(widths, "--widths"), parse_int_list(heads, "--heads"),
                             dtypes.parse_list(dtype_list) if dtype_list is not None else ())
    work = suites.with_reorderings(work, methods)
    prior = _prior_run(Path(out_dir)) if out_dir is not None else None
    if cache_path:
        check_cache_path(cache_path)
    bench_plan.check_work(work)
    if dry_run:
        dry_run_mod.report(bench_plan.plan_work(work, root, seed), "autosage bench", as_json,
                           {"suite": chosen.name,
                            "out": out_dir or f"results/{_dt.date.today().isoformat()}-<gpu name>"})
        return
    require_gpu("autosage bench", "--dry-run validates the run without one")

    options = RunOptions(repeat=chosen.repeat, flush_l2=flush_l2, oracle=oracle,
                         all_schedules=chosen.all_schedules, exhaustive=exhaustive, cache=cache_path or "", seed=seed, top_k=top_k,
                         budget_ms=budget_ms, guardrail=guardrail, root=root,
                         labeller=device_labeller() if "labelprop" in methods else None)
    toolkit = toolkit_mod.GpuToolkit()
    ctx, env = make_context(toolkit, options)
    out = Path(out_dir) if out_dir is not None else default_out(ctx.gpu)
    old_rows, runs = prior if prior is not None else _prior_run(out)
    runs = runs + [{"command": _command_line(click.get_current_context()),
                    "suite": chosen.name, "timestamp": now_iso(), "seed": seed, "repeat": options.repeat,
                    "flush_l2": flush_l2,
                    "oracle": oracle, "exhaustive": exhaustive, "copy_tbps": ctx.copy_tbps, "environment": env}]
    created = not out.exists()
    make_dir(out)

    new_rows: list = []
    finished = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with SuiteProgress(count_cases(work)) as progress:
            for rows in run_suite(work, options, ctx, toolkit, progress.listener):
                new_rows += rows
                # Written after every case: a run cut short (timeout, Ctrl-C, a missing dataset
                # further down the suite) keeps everything it measured.
                report.write_csv(report.merge_rows(old_rows, new_rows), out / "results.csv")
                progress.case_done(rows)
        finished = True
    finally:
        signal.signal(signal.SIGTERM, previous)
        all_rows = report.merge_rows(old_rows, new_rows)
        if all_rows:
            report.write_run_dir(out, all_rows, env, runs, partial=not finished)
        elif created:
            shutil.rmtree(out, ignore_errors=True)  # nothing measured: leave no empty results dir
        if not finished:
            click.echo(f"stopped early: {len(new_rows)} rows measured"
                       + (f", written to {out}" if all_rows else ""), err=True)
    _render(all_rows, out, as_json)


def _suite_flags(suite: str, steps, batch_size, fanouts, reorder, modes=None) -> tuple[str, ...]:
    """The options that apply to some suites only, checked; the --reorder methods."""
    if modes is not None and suite != suites.TRAINING:
        raise AutosageError("--modes applies to --suite training only")
    if suite != suites.MINIBATCH:
        for flag, value in (("--steps", steps), ("--batch-size", batch_size), ("--fanouts", fanouts)):
            if value is not None:
                raise AutosageError(f"{flag} applies to --suite minibatch only")
    if reorder is not None and suite == suites.MINIBATCH:
        raise AutosageError("--reorder does not apply to --suite minibatch (each batch is a new graph)")
    return suites.parse_reorder(reorder, allow_auto=suite == suites.TRAINING)


def _prior_run(out: Path) -> tuple[list, list]:
    """(rows, runs) already in a results directory this run merges into; checks it is writable."""
    from ..bench import report

    check_writable(out)
    csv_path = out / "results.csv"
    rows = report.read_rows(csv_path) if csv_path.exists() else []
    return rows, report.read_runs(out / "results.json")[1]


def _command_line(ctx: click.Context) -> str:
    """The options this run was given (those that differ from their defaults), for the README."""
    words = ["autosage", "bench"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if value in (None, False, ()) or value == param.default:
            continue
        flag = param.opts[0]
        for v in (value if isinstance(value, tuple) else (value,)):
            words += [flag] if v is True else [flag, str(v)]
    return shlex.join(words)


def _render(rows, out: Path, as_json: bool) -> None:
    from ..bench import report

    if as_json:
        report.render_summary(_console(stderr=True), rows)
        click.echo(json.dumps(report.summary_dict(rows, str(out)), indent=1))
    else:
        report.render_summary(_console(stderr=False), rows)
    click.echo(f"results written to {out}/ (results.csv, results.json, README.md, plots)", err=True)


def _console(stderr: bool):
    """A rich console; off a terminal (logs, pipes) wide enough that the tables do not wrap."""
    from rich.console import Console

    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=160)

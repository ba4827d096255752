"""What the ``mosaic`` commands share: the Typer ``app``, option types, input checks, running a
flow under the data root's writer lock, and ``main()``, the console entry."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="mosaic",
    help="Adapt a general text-embedding model to a domain: PubMed snapshots in, adapted model out.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",  # docstring paragraphs reflow to the terminal
)
console = Console(stderr=True, soft_wrap=not sys.stderr.isatty())
"""Errors and progress, on stderr: in a file or a CI log an error's path stays on one line."""


def out_console() -> Console:
    """The console a command prints its results to: Rich's own on a terminal; in a file or a CI
    log, lines never wrap (a table keeps its natural width, a path stays on one line, so both
    read and copy as they are)."""
    return Console() if sys.stdout.isatty() else Console(width=100_000, soft_wrap=True)

DataRoot = Annotated[
    Path,
    typer.Option(
        "--data-root",
        "-d",
        envvar="MOSAIC_DATA_ROOT",
        help="Where partitions, manifests, the DuckDB catalog and cached results live.",
    ),
]
DEFAULT_ROOT = Path("mosaic-data")
_PROMPT_HELP = ("; 'none': no prompt. Giving one of --query-prompt/--document-prompt leaves the other empty "
                "unless it is given too. Default: the prompts the model declares in its sentence-transformers config.")
QueryPrompt = Annotated[Optional[str], typer.Option(
    "--query-prompt", help="Put this before every query the model encodes (e.g. 'search_query: ')" + _PROMPT_HELP)]
DocumentPrompt = Annotated[Optional[str], typer.Option(
    "--document-prompt", help="Put this before every document the model encodes (e.g. 'search_document: ')"
    + _PROMPT_HELP)]


def prompts_option(query: str | None, document: str | None) -> dict | None:
    """``--query-prompt`` / ``--document-prompt`` as a ``prompts`` section; None when neither is given."""
    if query is None and document is None:
        return None
    return {k: "" if v is None or v.lower() == "none" else v for k, v in (("query", query), ("document", document))}


Wait = Annotated[
    Optional[float],
    typer.Option(
        "--wait",
        metavar="[SECONDS]",
        help="If another command is writing the same data root: wait up to SECONDS for it to finish (`--wait` "
        "alone: as long as it takes). Default: exit at once, with code 3, naming the command that holds it.",
    ),
]


class InputProblem(ValueError):
    """A command's input is wrong; the message says what to pass instead."""


def _folder(path: Path, what: str = "data root") -> str:
    """``path`` resolved, after checking it is not a file (a folder that does not exist yet is fine)."""
    resolved = path.expanduser().resolve()
    if resolved.exists() and not resolved.is_dir():
        raise InputProblem(f"{what} {path} is a file: pass a folder (it is created if missing)")
    return str(resolved)


def _model(name: str) -> str:
    """``name`` unchanged, after checking it can be loaded (before any flow starts)."""
    from mosaic_core.modeling.refs import check_model

    check_model(name)
    return name


def check_teachers(stages) -> None:
    """Each margin_mse stage's teacher: loadable, and a cross-encoder of one label (before any flow starts)."""
    from mosaic_core.modeling.refs import check_cross_encoder

    for teacher in sorted({s.teacher for s in stages if s.teacher is not None}):
        check_cross_encoder(teacher, "teacher")


def parse_sets(items: list[str]) -> dict[str, object]:
    """``--set a.b=value`` items as {dotted path: value read as YAML (3, 0.5, true, [a, b], null)}."""
    import yaml

    sets = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputProblem(f"--set {item!r}: expected a dotted field and a value, e.g. train.heldout_pairs=500")
        try:
            sets[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as exc:
            raise InputProblem(f"--set {item!r}: the value is not YAML ({exc})") from exc
    return sets


INPUT_ERRORS = ("pydantic:ValidationError", "flows.runners:SchedulerUnreachable",
                "mosaic_core.evaluate.scoring:TaskUnavailable", "mosaic_core.modeling.refs:ModelNotFound",
                "mosaic_core.trainer.build:StageInputError", "mosaic_core.vocab.tokenizers:UnsupportedTokenizer",
                "storage.benchmarks:BenchmarkError", "storage.pairs_io:CorpusError", "storage.published:PublishError")
"""Errors that mean "the input is wrong", besides :class:`InputProblem` and a missing file or
folder: shown as one line that says what to do."""


def raised(exc: BaseException, error: str) -> bool:
    """Whether ``exc`` is an ``error`` (``"module:Name"``). Read from the modules already
    imported (one not imported raised nothing), so that checking an error imports nothing."""
    module, name = error.split(":")
    return module in sys.modules and isinstance(exc, getattr(sys.modules[module], name))


def is_input_error(exc: BaseException) -> bool:
    return isinstance(exc, (InputProblem, FileNotFoundError, NotADirectoryError)) or any(
        raised(exc, error) for error in INPUT_ERRORS)


def _locked(root: str | Path, wait: float | None):
    """The writer lock of data root ``root`` (see storage/lock.py), named after this command;
    ``wait`` as given to ``--wait`` (None: do not wait; infinity: no limit)."""
    from storage.lock import root_lock

    command = " ".join(["mosaic", *sys.argv[1:3 if sys.argv[1:2] == ["pairs"] else 2]])
    return root_lock(root, command, None if wait == math.inf else (wait or 0.0))


def _run(flow: str, *args, writes: str | Path | None = None, wait: float | None = None,
         output: str | Path | None = None, options: dict | None = None):
    """Run the flow ``flow`` (``"module:name"``, imported here: the arguments, evaluated before,
    checked the input without Prefect or torch), holding the writer lock of the data root it
    ``writes`` (none for a read-only run); ``output``: a folder it writes outside any data root
    (named if its disk fills up); ``options``: the flow's ``with_options``. The command's
    temporary Prefect server starts once the lock is held; its start overlaps the flow's imports."""
    import importlib

    from flows.server import api_ready, start_api
    from storage.space import writing

    if output is not None:
        writing(output)

    with _locked(writes, wait) if writes else contextlib.nullcontext():
        start_api()
        module, name = flow.split(":")
        run = getattr(importlib.import_module(module), name)
        run = run.with_options(**options) if options else run
        api_ready()
        return run(*args)


FLOW_COMMANDS = {"ingest", "filter", "pairs", "vocab", "train", "eval", "probe", "run"}
"""Commands that run Prefect flows (and need an API: the configured one, or a temporary server)."""


def _bare_wait(argv: list[str]) -> list[str]:
    """``--wait`` given without SECONDS (last, or before another option) means no limit."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--wait" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append("inf")
    return out


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    console.print(f"[yellow]warning:[/yellow] {escape(str(message))}")


def main() -> None:
    """The ``mosaic`` console entry. A wrong input ends with one clear line (exit 2); a data
    root another command is writing, with who holds it (exit 3); any other failure of a flow
    with its message in a few lines and where the full log is (exit 1); a full disk under a data
    root it wrote, in one line naming the root and its free space (exit 4); SIGTERM or SIGINT
    within seconds, in one line saying what is kept (exit 128 + the signal). The traceback only
    with ``--debug`` or ``MOSAIC_DEBUG=1``."""
    from flows.console import full_log
    from flows.server import command_api
    from storage.lock import RootBusy
    from storage.space import NoSpace
    from storage.stopping import STOP_SIGNALS, raise_stopped, stop_signal, stops_honoured

    debug = "--debug" in sys.argv or os.environ.get("MOSAIC_DEBUG") == "1"
    warnings.showwarning = _warning_line  # an old config's spelling, a library's notice: one line each
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")
    sys.argv[1:] = _bare_wait(sys.argv[1:])
    runs_flows = len(sys.argv) > 1 and sys.argv[1] in FLOW_COMMANDS and "--help" not in sys.argv
    log = full_log(sys.argv[1], tracebacks_on_console=debug) if runs_flows else contextlib.nullcontext()
    if runs_flows:
        for signum in STOP_SIGNALS:
            signal.signal(signum, raise_stopped)
    log_path = None
    try:
        with (log as log_path, command_api() if runs_flows else contextlib.nullcontext(),
              stops_honoured() if runs_flows else contextlib.nullcontext()):
            app()  # usage errors and typer.Exit end here with click's message and exit code
    except SystemExit:  # --help, usage errors, typer.Exit
        raise
    except BaseException as exc:
        if debug and stop_signal(exc) is None and not isinstance(exc, (RootBusy, NoSpace)):
            raise
        if (code := _ending(exc, log_path, runs_flows)) is None:
            raise
        sys.exit(code)


def _ending(exc: BaseException, log_path: str | None, runs_flows: bool) -> int | None:
    """Print how the command ended on ``exc`` in a few lines and return its exit code; None: show
    the traceback (a failure outside any flow, which is a bug)."""
    from flows.console import short
    from storage.lock import RootBusy
    from storage.space import NoSpace, space_problem
    from storage.stopping import stop_signal

    if (signum := stop_signal(exc)) is not None:
        console.print(f"[yellow]stopped ({signal.Signals(signum).name}):[/yellow] every step that finished is kept, "
                      "and a training stage's last checkpoint; run the same command to go on from there")
        return 128 + signum
    if isinstance(exc, (RootBusy, NoSpace)):
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return 3 if isinstance(exc, RootBusy) else 4
    if is_input_error(exc):
        console.print(f"[red]error:[/red] {escape(str(exc))}\n"
                      "[dim](--debug or MOSAIC_DEBUG=1 shows the traceback)[/dim]")
        return 2
    if (full := space_problem(exc)) is not None:  # a full disk, whatever the writer said
        where = f"\n[dim]full log: {log_path}[/dim]" if log_path else ""
        console.print(f"[red]error:[/red] {escape(full)}{where}")
        return 4
    if not runs_flows or not isinstance(exc, Exception):
        return None
    console.print(f"[red]error:[/red] {type(exc).__name__}: {escape(short(str(exc)))}\n"
                  f"[dim]full log with the traceback: {log_path} (or rerun with --debug)[/dim]")
    return 1



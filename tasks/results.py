"""Prefect's persisted task results, as JSON only.

Prefect's default result serializer is pickle, and a pickle read back runs whatever code its
bytes name: whoever could write a data root (where ingest and filter keep their results) could
make the next cached run execute code. So every task that persists its result uses Prefect's
JSON serializer (:data:`SERIALIZER`), and its cache key function is wrapped in
:func:`json_only`, which removes a record stored under that key that is not a JSON result
record — a pickle, or one a killed run left half-written — before Prefect looks for it: the
task runs again and replaces it, and no pickle is ever read.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Callable
from pathlib import Path

from prefect import Task
from prefect.context import TaskRunContext
from prefect.results import get_default_result_storage

from storage.layout import DataLayout, data_root_of

log = logging.getLogger(__name__)

SERIALIZER = "json"
"""The ``result_serializer`` of every task that persists its result."""


DECODER = "prefect.serializers.prefect_json_object_decoder"
OWN_TYPES = ("mosaic_core.", "storage.", "tasks.")
"""The packages whose classes a record may name: Prefect's JSON decoder imports whatever a
record's ``__class__`` says and builds it."""


def is_json_record(content: bytes) -> bool:
    """Whether ``content`` is a Prefect result record serialized as JSON by Prefect's own
    decoder, naming no class but this project's."""
    try:
        record = json.loads(content)
        serializer = record["metadata"]["serializer"]
        named: list[str] = []

        def collect(obj: dict) -> dict:
            named.extend(str(obj[k]) for k in ("__class__", "__exc_type__") if k in obj)
            return obj

        json.loads(record["result"], object_hook=collect)
    except (ValueError, KeyError, TypeError):
        return False
    return (serializer.get("type") == SERIALIZER and serializer.get("jsonlib", "json") == "json"
            and serializer.get("object_decoder", DECODER) == DECODER and all(n.startswith(OWN_TYPES) for n in named))


def json_only(key_fn: Callable[[TaskRunContext, dict], str]) -> Callable[[TaskRunContext, dict], str]:
    """Decorator of a task's cache key function: the key, once any record stored under it that
    is not a JSON result record is removed (so Prefect, which deserializes whatever a record
    names, finds nothing there and runs the task)."""

    @functools.wraps(key_fn)
    def checked(context: TaskRunContext, parameters: dict) -> str:
        key = key_fn(context, parameters)
        storage = context.result_store.result_storage or get_default_result_storage(_sync=True)
        basepath = getattr(storage, "basepath", None)
        if basepath is None:  # not a local folder: nothing to check here
            return key
        path = Path(basepath).expanduser() / key
        if path.is_file() and not is_json_record(path.read_bytes()):
            log.warning("cached result %s is not a JSON result record (a pickle, or cut short): removed, the task "
                        "runs again", path)
            path.unlink(missing_ok=True)
        return key

    return checked


def results_beside(out_path: str) -> Path | None:
    """Where a task writing ``out_path`` keeps its cache record: ``DATA_ROOT/.prefect-results``
    when ``out_path`` lies in a data root, so that a rerun from another Prefect home (a container,
    CI, a restored root) finds it; None outside any data root (Prefect's default,
    ``$PREFECT_HOME/storage``)."""
    root = data_root_of(out_path)
    return None if root is None else DataLayout(str(root)).results_dir


def recorded_beside(task: Task, out_path: str, **options) -> Task:
    """``task`` (with ``options``) keeping its cache record where :func:`results_beside` says."""
    if (results := results_beside(out_path)) is not None:
        options["result_storage"] = results
    return task.with_options(**options)


Output = Callable[[dict], tuple[Path | None, bool]]
"""A task's arguments, by name → (where its cache record lives, None for Prefect's default;
whether the output the record describes is whole on disk)."""


class Verified:
    """A persisted task whose cached result is used only while the output it describes verifies:
    each call or ``submit`` asks ``output`` with the call's arguments, keeps the record where it
    says, and bypasses the cache (the task runs again and replaces the record) when the output
    is gone or damaged. Everything else (``fn``, ``name``, ``with_options``) is the task's."""

    def __init__(self, task: Task, output: Output):
        self.task, self.output = task, output
        self._signature = inspect.signature(task.fn)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("task", "output", "_signature"):  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self.task, name)

    def _checked(self, args: tuple, kwargs: dict) -> Task:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        results, whole = self.output(bound.arguments)
        return self.task.with_options(refresh_cache=not whole,
                                      **({"result_storage": results} if results is not None else {}))

    def __call__(self, *args, **kwargs):
        return self._checked(args, kwargs)(*args, **kwargs)

    def submit(self, *args, **kwargs):
        return self._checked(args, kwargs).submit(*args, **kwargs)


def verified(output: Output) -> Callable[[Task], Verified]:
    """Decorator of a persisted ``@task`` (placed above it): see :class:`Verified`."""
    return lambda task: Verified(task, output)

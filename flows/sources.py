"""A data source's flows-layer functions, found from its config class (``mosaic_core.config_sources``):
``flow`` brings the pairs in, ``watch`` lists what a rebuild compares, ``check`` finds bad input
before a run starts."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from mosaic_core.config_sources import Source


def source_hook(source: Source, name: str) -> Callable | None:
    """The function ``type(source).<name>`` names as ``module:function``, imported; None when the
    source declares none."""
    ref = getattr(type(source), name)
    if ref is None:
        return None
    module, _, function = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise TypeError(f"source kind {source.kind!r}: its {name} {ref!r} names no function ({exc})") from exc

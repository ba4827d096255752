"""The generated reference pages: every ``mosaic`` command with its options (from the Typer app) and
every ``PipelineConfig`` section and field (from the pydantic models), never written by hand.

A MkDocs hook (``hooks:`` in mkdocs.yml): at build time it adds ``reference/cli.md`` to the site.
The configuration reference is committed (``docs/reference/config.md``, readable in a checkout:
``--help`` points there), written by ``python docs/gen_reference.py``; ``tests/test_docs.py``
fails when it is not what this script writes now, and when a command, option or field has no
help text (``missing_help``).
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
import unicodedata
from pathlib import Path
from typing import Any, Iterator, Literal, Union

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

CLI_PAGE = "reference/cli.md"
CONFIG_FILE = Path(__file__).resolve().parent / "reference" / "config.md"


# --- the command line ------------------------------------------------------------------------


def cli_command():
    """The ``mosaic`` command as Click sees it (every command group registered)."""
    import typer.main

    from cli import app  # importing the package registers every command group on the app

    return typer.main.get_command(app)


def walk_commands(command=None, path: str = "mosaic") -> Iterator[tuple[str, Any]]:
    """``(\"mosaic run\", command)`` for the root and every command and group below it, in help order."""
    command = command or cli_command()
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from walk_commands(sub, f"{path} {name}")


def _params(command) -> list:
    return [p for p in command.params if not getattr(p, "hidden", False)]


def _cell(text: object) -> str:
    """``text`` on one line, safe inside a Markdown table cell: pipes escaped, and brackets outside
    code spans too (``[@REVISION]`` would otherwise read as a link)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("[", "\\[").replace("]", "\\]") for i, p in enumerate(parts))


def _param_names(param) -> str:
    if param.param_type_name == "argument":
        return f"`{param.name.upper()}`"
    names = [*param.opts, *param.secondary_opts]
    return " / ".join(f"`{n}`" for n in names)


def _param_type(param) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    kind = _annotation_name(param.type_descriptor.annotation) if hasattr(param, "type_descriptor") \
        else _click_type_name(param.type)
    return f"{kind}, repeatable" if getattr(param, "multiple", False) else kind


def _annotation_name(annotation) -> str:
    """``Optional[list[Path]]`` → ``path``; an Enum or a Literal → its values."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (Union, types.UnionType, list, tuple) and args:
        return _annotation_name(args[0])
    if typing.get_origin(annotation) is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return getattr(annotation, "__name__", str(annotation)).lower()


def _click_type_name(click_type) -> str:
    choices = getattr(click_type, "choices", None)
    return " \\| ".join(f"`{c}`" for c in choices) if choices else click_type.name.lower()


def _param_default(param) -> str:
    if param.required:
        return "required"
    default = param.default
    if callable(default) or default is None or default == () or default == []:
        return ""
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def cli_markdown() -> str:
    """The page: the root's help, then per command its help, usage and a table of its options."""
    out = ["# Command line reference", "",
           "Generated from the `mosaic` Typer app (`cli/`) when the site is built; `mosaic COMMAND --help` "
           "prints the same text.", ""]
    for path, command in walk_commands():
        if path != "mosaic":
            out += ["#" * (path.count(" ") + 1) + f" `{path}`", ""]
        out += [(command.help or "").strip(), ""]
        params = _params(command)
        if hasattr(command, "commands"):
            subs = [f"[`{path} {n}`](#{_anchor(f'{path} {n}')})" for n, c in command.commands.items()
                    if not getattr(c, "hidden", False)]
            out += ["Commands: " + ", ".join(subs) + ".", ""]
            if not params:
                continue
        args = " ".join(p.name.upper() if p.required else f"[{p.name.upper()}]"
                        for p in params if p.param_type_name == "argument")
        out += ["```", f"{path} [OPTIONS]{' ' + args if args else ''}", "```", ""]
        if params:
            out += ["| option | type | default | what it does |", "| --- | --- | --- | --- |"]
            for p in params:
                env = f" (environment: `{p.envvar}`)" if getattr(p, "envvar", None) else ""
                out.append(f"| {_param_names(p)} | {_param_type(p)} | {_cell(_param_default(p))} | "
                           f"{_cell(getattr(p, 'help', None) or '')}{env} |")
            out.append("")
    return "\n".join(out) + "\n"


def _anchor(title: str) -> str:
    """The id MkDocs' toc extension gives a heading ``title`` (Python-Markdown's ``slugify``)."""
    text = unicodedata.normalize("NFKD", title.replace("`", "")).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


# --- the configuration -----------------------------------------------------------------------


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_list(annotation) -> bool:
    return typing.get_origin(annotation) in (tuple, list)


def walk_sections(model: type[BaseModel] | None = None, path: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """``(\"train.stages[]\", StageConfig)`` for the top level (path ``\"\"``) and every nested section,
    depth first in field order; a model met again (the prompts) is listed at its first path only, and
    each model of a union of kinds under its kind (``"eval_tasks[] kind: beir"``)."""
    from mosaic_core.config import PipelineConfig

    seen: set[type[BaseModel]] = set()

    def walk(m: type[BaseModel], p: str):
        seen.add(m)
        yield p, m
        for name, field in m.model_fields.items():
            subs = _models_in(field.annotation)
            for sub in subs:
                if sub not in seen:
                    sub_path = (f"{p}.{name}" if p else name) + ("[]" if _is_list(field.annotation) else "")
                    if len(subs) > 1 and "kind" in sub.model_fields:  # one section per kind of a union
                        sub_path += f" kind: {sub.model_fields['kind'].default}"
                    yield from walk(sub, sub_path)
                    # a field typed by a registry (the data source) takes any registered kind: each is a section
                    for kind, member in getattr(sub, "kinds", dict)().items():
                        if member not in seen:
                            yield from walk(member, f"{sub_path} kind: {kind}")

    yield from walk(model or PipelineConfig, path)


def _type(annotation, links: dict[type[BaseModel], str]) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:  # a discriminated union and its members: the types themselves
        return _type(args[0], links)
    if origin is Literal:
        return " \\| ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (Union, types.UnionType):
        return " \\| ".join(_type(a, links) for a in args)
    if origin in (tuple, list):
        return "list of " + _type(args[0], links) if args else "list"
    if annotation is type(None):
        return "`null`"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{links[annotation]}](#{_anchor(links[annotation])})" if annotation in links else annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default is PydanticUndefined else field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, tuple) and value and all(isinstance(v, BaseModel) for v in value):
        return "`[" + ", ".join(getattr(v, "name", type(v).__name__) for v in value) + "]`"
    return f"`{json.dumps(value, default=str)}`"


def _bounds(field) -> str:
    words = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥", "pattern": "matches"}
    found = []
    for meta in field.metadata:
        for attr, word in words.items():
            value = getattr(meta, attr, None)
            if value is not None:
                found.append(f"{word} `{value}`")
    return ", ".join(found)


def config_markdown() -> str:
    """The page: per section its docstring and a table of its fields (type, default, bounds, description)."""
    from mosaic_core.config import PRESETS

    sections = list(walk_sections())
    links = {model: (path or "top level") for path, model in sections}
    out = ["# Configuration reference", "",
           "Generated from the pydantic models in `mosaic_core/config*.py` by `python docs/gen_reference.py` "
           "(a test fails when it is not current). A pipeline "
           "YAML (`mosaic run --config FILE`; `docs/pipeline.example.yaml`) is a `PipelineConfig`: the top "
           "level below, with one mapping per section. Every field is optional unless its default says "
           "*required*; an unknown key is an error. A section used in several places (`prompts`) is described "
           "once, at its first place.", ""]
    for path, model in sections:
        title = path or "top level"
        out += [f"## {title}", "", f"`{model.__name__}`" + (": " + " ".join((model.__doc__ or "").split())
                                                           if model.__doc__ else ""), ""]
        out += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            bounds = _bounds(field)
            description = (field.description or "") + (f" ({bounds})" if bounds else "")
            out.append(f"| `{name}` | {_type(field.annotation, links)} | {_cell(_default(field))} | "
                       f"{_cell(description)} |")
        out.append("")
    out += ["## Training presets", "",
            "`mosaic train --preset NAME` starts from these stage lists, and a pipeline without `train.stages` "
            "trains `paper`; fields not shown take the defaults of [train.stages[]](#trainstages), as does every "
            "stage written out in a YAML.", "",
            "| preset | stages (kind, settings that differ from the defaults) |", "| --- | --- |"]
    for name, stages in PRESETS.items():
        described = []
        for stage in stages:
            changed = stage.model_dump(exclude_defaults=True, exclude={"name", "kind"})
            settings = ", ".join(f"{k}={json.dumps(v)}" for k, v in changed.items())
            described.append(f"`{stage.name}` ({stage.kind}{'; ' + settings if settings else ''})")
        out.append(f"| `{name}` | {_cell(' → '.join(described))} |")
    return "\n".join(out) + "\n"


# --- the check the tests run -----------------------------------------------------------------


def missing_help() -> list[str]:
    """Every command, option, argument and config field without help text, as readable names."""
    missing = []
    for path, command in walk_commands():
        if not (command.help or "").strip():
            missing.append(f"command `{path}`")
        for p in _params(command):
            if not (getattr(p, "help", None) or "").strip():
                missing.append(f"option {_param_names(p)} of `{path}`")
    for path, model in walk_sections():
        for name, field in model.model_fields.items():
            if not (field.description or "").strip():
                missing.append(f"config field `{path + '.' if path else ''}{name}` ({model.__name__})")
    return missing


# --- the MkDocs hook -------------------------------------------------------------------------


def on_files(files, config):
    """Add the generated pages to the site's files before the navigation is built."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, CLI_PAGE, content=cli_markdown()))
    return files


if __name__ == "__main__":
    CONFIG_FILE.write_text(config_markdown())
    print(f"wrote {CONFIG_FILE}")

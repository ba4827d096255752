"""``mosaic publish``: publish a model as DATA_ROOT/models/current by hand."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import DEFAULT_ROOT, DataRoot, Wait, _folder, _locked, app, console, out_console


@app.command()
def publish(
    run_or_model: Annotated[str, typer.Argument(help="A pipeline run id (see `mosaic history`) or a model "
                                                "directory.")],
    data_root: DataRoot = DEFAULT_ROOT,
    force: Annotated[bool, typer.Option(help="Publish even though the run failed its gate, or a bare model "
                                        "directory.")] = False,
    reason: Annotated[str, typer.Option(help="Why, recorded with the decision.")] = "published by hand",
    wait: Wait = None,
) -> None:
    """Publish a model as DATA_ROOT/models/current by hand: roll back to an earlier run's model, or
    (with --force) publish one the publish gate turned down. The decision is recorded and shown by
    `mosaic history`; the pipeline publishes what passes its gate by itself."""
    from storage.published import PublishError
    from tasks.publish import publish_by_hand

    root = _folder(data_root)
    try:
        with _locked(root, wait):
            record = publish_by_hand.fn(run_or_model, root, reason, force)
    except PublishError as exc:
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    out_console().print(f"published {record['candidate']} as {record['published_path']} "
                    f"(previous: {record['previous'] or 'none'})")


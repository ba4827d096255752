"""``mosaic export``: a model as ONNX, int8 ONNX, OpenVINO or a static model2vec model."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import _folder, _model, app, console, out_console


class Kind(str, enum.Enum):
    onnx = "onnx"
    onnx_int8 = "onnx-int8"
    openvino = "openvino"
    static = "static"


@app.command("export")
def export(
    model: Annotated[str, typer.Argument(help="The model to export: a model directory (e.g. DATA_ROOT/models/current), "
                                         "a hub id, or offline:all-MiniLM-L6-v2.")],
    to: Annotated[Kind, typer.Option("--to", help="onnx (fp32), onnx-int8 (dynamic int8 quantisation), openvino, or "
                                     "static (a model2vec model distilled with the model's own, expanded "
                                     "tokenizer).")],
    out: Annotated[Path, typer.Option("--out", help="The folder to write (a new or empty folder, or an earlier "
                                      "export, which is replaced). Nothing is written if the export is refused.")],
    texts: Annotated[Optional[Path], typer.Option(help="A text file, one text per line, to compare the export's "
                                                  "embeddings with the PyTorch model's on (besides a built-in "
                                                  "sample and the model's domain words).")] = None,
    pairs: Annotated[Optional[Path], typer.Option(help="Held-out (query, document) pairs (any pairs file `mosaic "
                                                  "pairs` reads) for an NDCG@10 check: int8 must stay within 0.5 "
                                                  "points of the PyTorch model.")] = None,
    max_pairs: Annotated[int, typer.Option(min=1, help="Pairs of --pairs used (the first ones).")] = 500,
    query_column: Annotated[str, typer.Option(help="--pairs: the query column.")] = "query",
    document_column: Annotated[str, typer.Option(help="--pairs: the document column.")] = "document",
    static_dims: Annotated[int, typer.Option(min=2, help="static: dimensions kept by PCA (at most the model's "
                                             "hidden size).")] = 256,
) -> None:
    """Export MODEL for fast serving, verified before it is kept: the embeddings of ONNX and
    OpenVINO exports must reach a mean cosine of 0.99 to the PyTorch model's (int8: 0.98, and
    NDCG@10 within 0.5 points on --pairs), else the export is refused with the numbers (exit 1)
    and nothing is written. A static export keeps domain tokens whole. Needs
    `pip install -e '.[export]'`."""
    from mosaic_core.export import ExportRefused, ExportUnavailable, export_model

    out_dir = _folder(out, "--out")
    source = _model(model)
    try:
        sample = _lines(texts) if texts else []
        held = _pairs(pairs, query_column, document_column)[:max_pairs] if pairs else []
        result = export_model(source, to.value, out_dir, texts=sample, pairs=held, static_dims=static_dims)
    except ExportRefused as exc:  # the export is wrong, not the input: exit 1
        console.print(f"refused: {exc}", style="red", markup=False)
        raise typer.Exit(1) from exc
    except (ExportUnavailable, ValueError, FileNotFoundError) as exc:
        console.print(f"error: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc
    m = result.metrics
    agreement = (f"cosine to PyTorch {m['cosine_mean']:.4f} (min {m['cosine_min']:.4f})" if "cosine_mean" in m
                 else f"{m['domain_words_whole']} domain words whole, {m['vocabulary']:,} tokens, {m['dims']} dims")
    ndcg = f"; NDCG@10 {m['ndcg10']:.2f} (PyTorch {m['ndcg10_torch']:.2f})" if "ndcg10" in m else ""
    out_console().print(f"exported {model} as {to.value} to {result.out_dir} ({result.size_bytes / 2**20:.1f} MiB): "
                    f"{agreement}{ndcg}; {m['speedup']:.2f}x PyTorch's speed on this machine", markup=False)


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"--texts {path}: no such file (one text per line)")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _pairs(path: Path, query_column: str, document_column: str) -> list[tuple[str, str]]:
    from storage.pairs_io import read_pairs

    if not path.exists():
        raise FileNotFoundError(f"--pairs {path}: no such file")
    found, _ = read_pairs(str(path), query_column, document_column)
    if not found:
        raise ValueError(f"--pairs {path}: no usable (query, document) pairs in columns {query_column!r}, "
                         f"{document_column!r}")
    return found

"""A recipe soup: the adapted model's and the control's weights averaged. Does it beat both?

    python bench/recipe_soup.py --work /work/runs/default-recipe --results bench/results/default_recipe \
        [--arm default_80_lr1e-05] [--control control_80_lr1e-05] [--weights 0.5]

Both models start from the same weights (stage 1 adds embedding rows and leaves every base weight
as it was), so their average is a model soup (Wortsman et al. 2022): ``θ(w) = (1 − w)·θ_control
+ w·θ_adapted`` for every weight the two share; the new tokens' embedding rows, which the control
never had, are the adapted model's; the tokenizer is the adapted model's. Needs the two arms of
``bench/budget_curve.py`` trained in WORK (``--arms control,default``); each soup is written to
``WORK/soup_<arm>_w<w>/``, scored like the curve's points (SciFact and the held-out pairs, cached
in ``WORK/eval``) and recorded in RESULTS as ``soup_<arm>_w<w>.json``; the table prints each
against the control and the arm, 95 % paired bootstrap intervals.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.budget_curve import _against, _record, _score, _scores, final_stage  # noqa: E402
from mosaic_core.trainer.merge import interpolate  # noqa: E402


def soup(control: Path, adapted: Path, weight: float, out: Path) -> Path:
    """``adapted``'s folder with its weights averaged with ``control``'s at ``weight`` (see above):
    the control's word embeddings take the adapted model's new rows, so that the project's WiSE-FT
    interpolation (:func:`mosaic_core.trainer.merge.interpolate`) mixes them, not a copy of it."""
    a, c = load_file(str(adapted / "model.safetensors")), load_file(str(control / "model.safetensors"))
    start = {}
    for name, t in c.items():
        end = a.get(name)
        if end is not None and t.shape[1:] == end.shape[1:] and t.shape[0] < end.shape[0]:
            t = torch.cat([t, end[t.shape[0]:].to(t.dtype)])  # the new tokens' rows: lerp(end, end) = end
        start[name] = t
    try:
        mixed = interpolate(start, a, weight)
    except ValueError as exc:
        raise SystemExit(f"{control} and {adapted} do not share their weights: {exc}") from exc
    shutil.copytree(adapted, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("checkpoints", "tb", "*.jsonl"))
    save_file(mixed, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="bench/budget_curve.py's WORK, arms trained")
    parser.add_argument("--results", type=Path, required=True, help="its RESULTS (the arms' records)")
    parser.add_argument("--arm", default="default_80_lr1e-05", help="the adapted arm's point id")
    parser.add_argument("--control", default="control_80_lr1e-05", help="the control's point id")
    parser.add_argument("--weights", default="0.5", help="the adapted model's share(s), comma-separated")
    args = parser.parse_args()
    work, results = args.work.resolve(), args.results.resolve()
    arm, control = _scores(_record(results, args.arm)), _scores(_record(results, args.control))
    if arm is None or control is None:
        raise SystemExit(f"{results}: {args.arm} and {args.control} must be scored first (bench/budget_curve.py)")
    for w in (float(x) for x in args.weights.split(",") if x):
        name = f"soup_{args.arm.split('_')[0]}_w{w:g}"
        if _record(results, name) is None:
            model = soup(final_stage(work / args.control), final_stage(work / args.arm), w, work / name)
            _score(work, results, name, str(model), None)
        scores = _scores(_record(results, name))
        for ref, ref_scores in ((args.control, control), (args.arm, arm)):
            cells = "; ".join(f"{task} {100 * next(s.value for s in scores if s.task == task):.2f}, "
                              f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"
                              for task, d in _against(scores, ref_scores).items())
            print(f"{name} against {ref}: {cells}")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Training that pays (issue #17), on the real biomedical pairs of ../shared/data/biomed with the
# offline MiniLM, from a distilled stage 1, scored on SciFact (local BEIR files) and the run's
# held-out test pairs:
#   - the paper preset (joint, contrastive), STEPS steps each, keeping each stage's last model,
#   - the same keeping each stage's best validated model (every EVAL_EVERY steps),
#   - the same with one hard negative per pair (mined with the stage-1 model),
#   - the hard-negative run merged with stage 1 (WiSE-FT, weight chosen on validation pairs),
#   - contrastive only from the base model, without new vocabulary, for 2·STEPS steps.
#
#   bash bench/training_comparison.sh [WORK_DIR] [STEPS] [EVAL_EVERY] [STAGE1]
#
# Defaults: STEPS 40, EVAL_EVERY 10 (the 2-core VM's budget), STAGE1 WORK_DIR/stage1-pooled
# (bench/stage1_comparison.sh builds it). Writes WORK_DIR/training-report/report.{md,html}.
set -euo pipefail
WORK=${1:-mosaic-stage1}
STEPS=${2:-40}
EVAL_EVERY=${3:-10}
STAGE1=${4:-$WORK/stage1-pooled}
SKIP_STAGE1=1 source "$(dirname "$0")/real_data.sh"
TRAIN=(mosaic train --model "$STAGE1" --pairs "$PAIRS" "${COLS[@]}" --preset paper "${SET[@]}")

"${TRAIN[@]}" --out "$WORK/paper-last" --set keep_best=false
"${TRAIN[@]}" --out "$WORK/paper-best" --set eval_every="$EVAL_EVERY"
"${TRAIN[@]}" --out "$WORK/paper-hardneg" --set eval_every="$EVAL_EVERY" --set hard_negatives=1 \
  --merge 0.5 --merge 0.75
mosaic train --model offline:all-MiniLM-L6-v2 --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/contrastive-only" \
  --preset contrastive-only "${SET[@]}" --set contrastive.max_steps=$((2 * STEPS))
mosaic eval --out "$WORK/training-report" "${EVAL[@]}" \
  --model base=offline:all-MiniLM-L6-v2 --model stage1="$STAGE1" \
  --model paper-last="$WORK/paper-last/2-contrastive" --model paper-best="$WORK/paper-best/2-contrastive" \
  --model paper-hardneg="$WORK/paper-hardneg/2-contrastive" --model paper-hardneg-merged="$WORK/paper-hardneg/3-merge" \
  --model contrastive-only="$WORK/contrastive-only/1-contrastive"

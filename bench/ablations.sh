#!/usr/bin/env bash
# Real-data check of the paper's ablation ordering (issue #5): the paper's run (joint
# domain-restricted MLM, then contrastive) against all-token MLM (the preset's α = 0.1, as in
# the paper) and contrastive only for the same total number of steps, on the real biomedical
# title/abstract pairs of ../shared/data/biomed with the offline MiniLM, scored on SciFact
# (local BEIR files) and the run's held-out pairs.
#
#   bash bench/ablations.sh [WORK_DIR] [STEPS]
#
# Each stage runs STEPS optimizer steps (default 150; contrastive only runs 2·STEPS) at batch
# 32, documents cut to 128 tokens. Stage 1 and the paper run are shared with
# bench/warmup_comparison.sh on the same WORK_DIR (cached when the code is unchanged).
# Writes WORK_DIR/ablations/report.{md,html}.
set -euo pipefail
WORK=${1:-mosaic-ablations}
STEPS=${2:-150}
source "$(dirname "$0")/real_data.sh"

mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/paper" --preset paper "${SET[@]}"
mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/all-token" --preset all-token "${SET[@]}"
mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/contrastive-only" \
  --preset contrastive-only "${SET[@]}" --set contrastive.max_steps=$((2 * STEPS))
mosaic eval --out "$WORK/ablations" "${EVAL[@]}" \
  --model base=offline:all-MiniLM-L6-v2 --model stage1="$WORK/stage1" \
  --model joint="$WORK/paper/1-joint" --model joint+contrastive="$WORK/paper/2-contrastive" \
  --model all-token-joint="$WORK/all-token/1-joint" \
  --model all-token-joint+contrastive="$WORK/all-token/2-contrastive" \
  --model contrastive-only="$WORK/contrastive-only/1-contrastive"

#!/usr/bin/env bash
# Real-data check of issue #5's warm-up question: the joint stage with and without the MLM
# warm-up (domain rows and head, or the head alone: mlm_rows=false), on the real biomedical
# title/abstract pairs of ../shared/data/biomed, with the offline MiniLM, scored on SciFact
# (local BEIR files) and the run's held-out pairs.
#
#   bash bench/warmup_comparison.sh [WORK_DIR] [STEPS] [WARMUP_STEPS]
#
# The joint and contrastive stages run STEPS optimizer steps each (default 150) at batch 32,
# documents cut to 128 tokens, so the whole comparison fits a 2-core CPU in about an hour; the
# warm-up runs until its MLM loss is below its target (the preset's mlm_target), at most
# WARMUP_STEPS steps (default 600). On a GPU raise both and drop the --set overrides.
# Writes WORK_DIR/report/report.{md,html}.
set -euo pipefail
WORK=${1:-mosaic-warmup-comparison}
STEPS=${2:-150}
WARMUP_STEPS=${3:-600}
source "$(dirname "$0")/real_data.sh"

mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/paper" --preset paper "${SET[@]}"
mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/warmup" --preset warmup "${SET[@]}" \
  --set mlm.max_steps="$WARMUP_STEPS" --set mlm.log_every=20
mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/warmup-head" --preset warmup "${SET[@]}" \
  --set mlm.max_steps="$WARMUP_STEPS" --set mlm.log_every=20 --set mlm.mlm_rows=false
mosaic eval --out "$WORK/report" "${EVAL[@]}" \
  --model base=offline:all-MiniLM-L6-v2 --model stage1="$WORK/stage1" \
  --model joint="$WORK/paper/1-joint" --model joint+contrastive="$WORK/paper/2-contrastive" \
  --model warmup+joint="$WORK/warmup/2-joint" --model warmup+joint+contrastive="$WORK/warmup/3-contrastive" \
  --model head-warmup+joint="$WORK/warmup-head/2-joint" \
  --model head-warmup+joint+contrastive="$WORK/warmup-head/3-contrastive"

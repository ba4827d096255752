#!/usr/bin/env bash
# Stage 1 that costs nothing (issue #16), measured on the real biomedical pairs of
# ../shared/data/biomed with the offline MiniLM, scored on SciFact (local BEIR files) and the
# run's held-out pairs:
#   - selected tokens (min_count 20) with mean-of-pieces rows,
#   - selected tokens with distilled rows (pooled target, and token-state target),
#   - fewer tokens (min_count 50) distilled at a higher rate (3e-3), DISTILL_STEPS steps,
#   - the defaults (min_count 50, rate 3e-3, distilled for one pass over the corpus: 537 steps here),
#   - the defaults again with another distillation seed (how much one score moves with the data order),
#   - the rate and the threshold apart, one pass each: min_count 50 at 1e-3, min_count 100 at
#     3e-3 and at 1e-3,
#   - the defaults distilled on sentences drawn per new token (32 each) instead of whole texts,
#     at two seeds, and at min_count 100 with 64 sentences per token,
#   - the costliest 20 % of the tokens pruned after distillation, at two seeds,
#   - the defaults now: the costliest 30 % pruned, at two seeds,
#   - the paper preset (joint, contrastive; STEPS steps each, the ablations' CPU budget) from
#     the distilled stage 1,
#   - contrastive only from the base model, without new vocabulary, for 2·STEPS steps.
#
#   bash bench/stage1_comparison.sh [WORK_DIR] [STEPS] [DISTILL_STEPS]
#
# Defaults: STEPS 40, DISTILL_STEPS 400 (the 2-core VM's budget; on a GPU drop the caps).
# Writes WORK_DIR/report/report.{md,html} (with each model's paired interval against the base);
# each stage 1's vocab_report.md has its tokens,
# fertility, drift and the seconds each step took.
set -euo pipefail
WORK=${1:-mosaic-stage1}
STEPS=${2:-40}
DISTILL_STEPS=${3:-400}
SKIP_STAGE1=1 source "$(dirname "$0")/real_data.sh"
VOCAB=(mosaic vocab --corpus "$PAIRS" --columns title --columns abstract --base-model offline:all-MiniLM-L6-v2)
UNPRUNED=("${VOCAB[@]}" --prune 0)  # the rows measured before pruning became the default (2026-11-24)
TEXTS=("${UNPRUNED[@]}" --distill-contexts texts)  # and before sentences drawn per token did (2026-11-24)

OLD=(--min-count 20 --distill-lr 0.001)  # the defaults before 2026-11-23, evening
"${TEXTS[@]}" "${OLD[@]}" --out "$WORK/stage1-mean" --init mean
"${TEXTS[@]}" "${OLD[@]}" --out "$WORK/stage1-pooled" --distill-target pooled --distill-steps "$DISTILL_STEPS"
"${TEXTS[@]}" "${OLD[@]}" --out "$WORK/stage1-tokens" --distill-target tokens --distill-steps "$DISTILL_STEPS"
"${TEXTS[@]}" --out "$WORK/stage1-mc50" --min-count 50 --distill-lr 0.003 --distill-steps "$DISTILL_STEPS"
"${TEXTS[@]}" --out "$WORK/stage1-default"
"${TEXTS[@]}" --out "$WORK/stage1-default-seed1" --distill-seed 1
"${TEXTS[@]}" --out "$WORK/stage1-mc50-lr1" --min-count 50 --distill-lr 0.001
"${TEXTS[@]}" --out "$WORK/stage1-mc100" --min-count 100 --distill-lr 0.003
"${TEXTS[@]}" --out "$WORK/stage1-mc100-lr1" --min-count 100 --distill-lr 0.001
"${UNPRUNED[@]}" --out "$WORK/stage1-sentences" --distill-contexts sentences
"${UNPRUNED[@]}" --out "$WORK/stage1-sentences-seed1" --distill-contexts sentences --distill-seed 1
"${UNPRUNED[@]}" --out "$WORK/stage1-mc100-pt64" --min-count 100 --distill-per-token 64
"${VOCAB[@]}" --out "$WORK/stage1-prune20" --prune 0.2
"${VOCAB[@]}" --out "$WORK/stage1-prune20-seed1" --prune 0.2 --distill-seed 1
"${VOCAB[@]}" --out "$WORK/stage1-prune30"
"${VOCAB[@]}" --out "$WORK/stage1-prune30-seed1" --distill-seed 1
mosaic train --model "$WORK/stage1-pooled" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/paper" --preset paper "${SET[@]}"
mosaic train --model offline:all-MiniLM-L6-v2 --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/contrastive-only" \
  --preset contrastive-only "${SET[@]}" --set contrastive.max_steps=$((2 * STEPS))
mosaic eval --out "$WORK/report" "${EVAL[@]}" \
  --model base=offline:all-MiniLM-L6-v2 --model stage1-mean="$WORK/stage1-mean" \
  --model stage1-pooled="$WORK/stage1-pooled" --model stage1-tokens="$WORK/stage1-tokens" \
  --model stage1-mc50="$WORK/stage1-mc50" --model stage1-default="$WORK/stage1-default" \
  --model stage1-default-seed1="$WORK/stage1-default-seed1" \
  --model stage1-mc50-lr1="$WORK/stage1-mc50-lr1" --model stage1-mc100="$WORK/stage1-mc100" \
  --model stage1-mc100-lr1="$WORK/stage1-mc100-lr1" \
  --model stage1-sentences="$WORK/stage1-sentences" --model stage1-sentences-seed1="$WORK/stage1-sentences-seed1" \
  --model stage1-mc100-pt64="$WORK/stage1-mc100-pt64" \
  --model stage1-prune20="$WORK/stage1-prune20" --model stage1-prune20-seed1="$WORK/stage1-prune20-seed1" \
  --model stage1-prune30="$WORK/stage1-prune30" --model stage1-prune30-seed1="$WORK/stage1-prune30-seed1" \
  --model joint="$WORK/paper/1-joint" --model joint+contrastive="$WORK/paper/2-contrastive" \
  --model contrastive-only="$WORK/contrastive-only/1-contrastive"

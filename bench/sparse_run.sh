#!/usr/bin/env bash
# The sparse (SPLADE) model kind end to end on the real biomedical pairs (issue #22, seed 003),
# with the offline MiniLM, the only model this machine has. It ships no masked-LM head, so its
# SPLADE head starts random: the warmup preset trains it first (mlm → joint → contrastive, all
# sparse). Scored on the run's held-out pairs as SPLADE (`--model-kind sparse`).
#
#   bash bench/sparse_run.sh [WORK_DIR] [STEPS]
#
# Defaults: STEPS 40 per stage (the 2-core VM's budget). A real run starts from a base with an
# MLM head (naver/splade-cocondenser-ensembledistil, bert-base-uncased): docs/sparse.example.yaml.
set -euo pipefail
WORK=${1:-mosaic-sparse}
STEPS=${2:-40}
SKIP_STAGE1=1 source "$(dirname "$0")/real_data.sh"
mosaic vocab --corpus "$PAIRS" --columns title --columns abstract --base-model offline:all-MiniLM-L6-v2 \
  --out "$WORK/stage1" --init mean --model-kind sparse
mosaic train --model "$WORK/stage1" --pairs "$PAIRS" "${COLS[@]}" --out "$WORK/train" --preset warmup \
  --model-kind sparse --validation-pairs 128 --set batch_size=32 --set chunk_size=8 --set document_max_length=128 \
  --set "mlm.max_steps=$STEPS" --set "joint.max_steps=$STEPS" --set "contrastive.max_steps=$STEPS" \
  --set joint.lr=5e-5 --set contrastive.lr=5e-5
mosaic eval --out "$WORK/report" --heldout "$PAIRS" "${COLS[@]}" --pool 2000 --model-kind sparse \
  --model base=offline:all-MiniLM-L6-v2 --model sparse-contrastive="$WORK/train/3-contrastive"

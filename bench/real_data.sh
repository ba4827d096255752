# Shared by the real-data comparison scripts (sourced, not run): where the real biomedical
# pairs and SciFact live (../shared/data beside the repo), the column names, the CPU-budget
# training overrides for STEPS optimizer steps per stage, and stage 1 on the pairs' corpus
# (built once per WORK directory, reused by the next script run on the same WORK; SKIP_STAGE1=1
# for a script that builds its own).
SHARED=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data
PAIRS=$SHARED/biomed/biomed_title_abstract.jsonl
COLS=(--query-column title --document-column abstract)
SET=(--set "max_steps=$STEPS" --set batch_size=32 --set document_max_length=128 --set checkpoint_every=1000)
EVAL=(--beir "$SHARED/scifact" --heldout "$PAIRS" "${COLS[@]}" --pool 2000)

if [[ -z "${SKIP_STAGE1:-}" && ! -f "$WORK/stage1/config.json" ]]; then
  mosaic vocab --corpus "$PAIRS" --columns title --columns abstract --base-model offline:all-MiniLM-L6-v2 \
    --out "$WORK/stage1"
fi

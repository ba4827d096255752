"""Stage 1: the domain tokenizer, the evidence-based selection of its tokens, their rows
(initialised and distilled), pruning, the reduction to a corpus, and the stage's report.
Imports ``mosaic_core.modeling``."""

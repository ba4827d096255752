"""Scoring and judging models: mteb and local tasks, the comparison and run reports, the
invented-term probe, the vocabulary diagnostics and the publish gate's rule. The top of the
method: it may import every other subpackage."""

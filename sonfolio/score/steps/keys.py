"""The score track's metric keys that its bench, eval and report faces share (one place, so the
report reads what the others write; importing it pulls in nothing else)."""

# the bench's quality key per variant: the token error rate over the tokenizer's tokens
GATE_METRIC = "ter"
# the eval's keys compared with the reference variant (delta_<key>) and quality.csv's columns
EVAL_DELTA_KEYS = ("ser", "cer", "exact_match", "compile_rate")

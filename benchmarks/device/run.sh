#!/bin/bash
# One device call (benchmarks/device/pack.py fills .gpu/ first): the GPU checks docs/gpu-runs.md
# lists, each step capped, output into $OUT.
# At most 8 files come back from $OUT: env.txt, steps.log, the JSONs and the caller's log.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STEPS=${STEPS:-20}
CAP=${CAP:-1}
t0=$(date +%s)
stamp() { echo "=== $1 at +$(( $(date +%s) - t0 )) s"; }
stamp env
{ nvidia-smi; nvidia-smi -q | grep -iE "product name|driver version|cuda version|power limit|max clocks" ; lscpu; grep -m1 flags /proc/cpuinfo; python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"; } > "$OUT/env.txt" 2>&1
tail -2 "$OUT/env.txt"
stamp data
rm -rf data models && cp -r .gpu/data .gpu/models . && mkdir -p /tmp/wb && cp .gpu/whisper-base/* /tmp/wb/ \
  && cp models/speech_tokenizer/* /tmp/wb/ || exit 1
python3 - <<'PY' || exit 1
# whisper-base's architecture with random weights (the real ones are 290 MB, over what a call
# carries): the step time depends on the shapes, not the values
import yaml, torch
from transformers import WhisperConfig, WhisperForConditionalGeneration
torch.manual_seed(0)
WhisperForConditionalGeneration(WhisperConfig.from_pretrained("/tmp/wb")).save_pretrained("/tmp/wb")
p = yaml.safe_load(open("params.yaml"))
p["speech_train"]["model"]["base_model"] = "/tmp/wb"
p["speech_tokenizer"]["base_model"] = "/tmp/wb"
yaml.safe_dump(p, open("params.yaml", "w"), sort_keys=False)
PY
for t in score speech; do
  stamp compare-$t
  # into a file, not a pipe: a killed step's spawned children would hold a pipe open
  rm -f benchmarks/results/train_compare.json
  timeout $((CAP*$([ $t = score ] && echo 150 || echo 210))) python3 -m benchmarks.train_step --compare --steps "$STEPS" --tracks ${t}_train >> "$OUT/steps.log" 2>&1
  grep -v Warning "$OUT/steps.log" | tail -14
  cp benchmarks/results/train_compare.json "$OUT/train_compare_$t.json" 2>/dev/null
done
stamp pytest-gpu
timeout $((CAP*100)) python3 -m pytest -p no:cacheprovider -m gpu tests/train/test_train_gpu.py -q >> "$OUT/steps.log" 2>&1; tail -20 "$OUT/steps.log"
stamp breakdown
rm -f benchmarks/results/train_step.json
timeout $((CAP*60)) python3 -m benchmarks.train_step --steps "$STEPS" >> "$OUT/steps.log" 2>&1; grep -v Warning "$OUT/steps.log" | tail -12
cp benchmarks/results/train_step.json "$OUT/" 2>/dev/null
stamp estimate
timeout $((CAP*50)) python3 -c "import sys; from sonfolio.cli import main; sys.exit(main(['estimate','--track','both','--json']))" > "$OUT/estimate.json" 2>> "$OUT/steps.log"; echo rc $?
stamp done

#!/usr/bin/env bash
# The one prepared script for a session that is lent a GPU (device tool, one call, about 9 minutes):
#   here first:  bash scripts/device-wheels.sh
#   then:        run(command="bash scripts/device-check.sh", carry=[".whl"], timeout_s=600)
# 1. CUDA checks: every baseline's contract on the GPU (train, checkpoint, act; the checkpoint loaded onto the CPU).
# 2. AD training and KV-cache generation speed at the published model size on the GPU (benchmarks/speed/ad_training.py).
# 3. The longest AD result run that fits: the published model (baselines/ad/default.toml) with one token per step,
#    AD_STEPS updates at batch 512 on AD_DATASET, killed after AD_SECONDS; its evaluations come back even then.
# What comes back under $OUT (8 files, the device tool's most): gpu.txt, cuda-tests.log, ad-speed.log, ad-run.log,
# ad/run.json, ad/summary.json, ad/evaluations.jsonl, ad/metrics.jsonl. Record them in benchmarks/speed/README.md and the studies.
set -uo pipefail
: "${OUT:?run this through the device tool, which sets OUT}"
AD_DATASET=${AD_DATASET:-darkroom-ad-eps-fast}
AD_STEPS=${AD_STEPS:-20000}
AD_SECONDS=${AD_SECONDS:-330}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu with small AD_STEPS, AD_SETS and SPEED_ARGS: a dry run on a CPU machine
SPEED_ARGS=${SPEED_ARGS:---hidden 512 --batch 512 --updates 10 --rounds 2}
AD_SETS=${AD_SETS:-}  # extra --set overrides for the AD run (a dry run shrinks the batch and the evaluation with them)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OFFBENCH_HOME=/tmp/offbench-home
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"; } 2>&1 | tee "$OUT/gpu.txt"

timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/training/test_protocols.py -k "contract and cuda" -rs 2>&1 | tee "$OUT/cuda-tests.log"

timeout 90 python3 benchmarks/speed/ad_training.py $SPEED_ARGS --device "$DEVICE" 2>&1 | tee "$OUT/ad-speed.log"

python3 -m offbench download "$AD_DATASET" > /dev/null
timeout "$AD_SECONDS" python3 -m offbench run baseline ad --dataset "$AD_DATASET" --config baselines/ad/default.toml --device "$DEVICE" \
    --set token_layout=step --set steps="$AD_STEPS" --set cosine_steps="$AD_STEPS" --set warmup_steps=$((AD_STEPS / 10)) \
    --set eval_every=$((AD_STEPS / 4)) --set checkpoint_every=$((AD_STEPS / 4)) $AD_SETS --seed 0 --out /tmp/ad-runs --name ad 2>&1 | tee "$OUT/ad-run.log"
mkdir -p "$OUT/ad"
for f in run.json summary.json evaluations.jsonl metrics.jsonl; do cp "/tmp/ad-runs/ad/$f" "$OUT/ad/" 2>/dev/null; done
ls -l "$OUT" "$OUT/ad"

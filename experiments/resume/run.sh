#!/bin/bash
# Stops the issue's 40-step run of configs/cifar_small.py twice, with kill -9
# and with SIGTERM, reruns each, and compares every logged record (timings
# left out) with an uninterrupted run. Usage, from the repository root:
#   bash experiments/resume/run.sh [DATA_DIR] [WORK_DIR]
set -u
DATA=${1:-../shared/data/cifar10-5k}
WORK=${2:-/tmp/vit_jax_resume}
FLAGS=(--config=configs/cifar_small.py "--config.data_dir=$DATA"
       --config.total_steps=40 --config.log_every_steps=2
       --config.eval_every_steps=8 --config.checkpoint_every_steps=4)
rm -rf "$WORK" && mkdir -p "$WORK"

# `exec`: in the background the signals reach python itself, not a subshell.
run() { exec python -m vit_jax.main "${FLAGS[@]}" --workdir="$WORK/$1" >> "$WORK/$1.log" 2>&1; }
logged() { [ -f "$WORK/$1/metrics.jsonl" ] && grep -q "\"step\": $2," "$WORK/$1/metrics.jsonl"; }

(run whole); echo "uninterrupted: exit $?"

(run killed) & pid=$!
until logged killed 14; do sleep 0.2; done
kill -9 $pid; wait $pid; echo "kill -9 after step 14: exit $?"
(run killed); echo "rerun: exit $?"

(run term) & pid=$!
until logged term 16; do sleep 0.2; done  # step 17 has no checkpoint scheduled
start=$(date +%s.%N); kill -TERM $pid; wait $pid; status=$?
echo "SIGTERM after step 16: exit $status, $(python -c "print(round($(date +%s.%N) - $start, 1))") s after the signal"
grep -o 'Preempted.*' "$WORK/term.log"
(run term); echo "rerun: exit $?"

python - "$WORK" <<'PY'
import json, sys
timings = ('images_per_second', 'flops_per_second', 'seconds', 'peak_share')
def records(name):
  with open(f'{sys.argv[1]}/{name}/metrics.jsonl') as f:
    return [{k: v for k, v in json.loads(line).items() if k not in timings}
            for line in f]
whole = records('whole')
for name in ('killed', 'term'):
  print(f'{name}: {len(records(name))} records, identical to the '
        f'uninterrupted run: {records(name) == whole}')
PY

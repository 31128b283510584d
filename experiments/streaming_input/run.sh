#!/bin/bash
# The streaming input's thread-pool loader, kept at the commit POOL_COMMIT
# pins as a baseline, against this tree's grain loader (its threads and its
# worker processes): `python -m vit_jax.benchmark_input` of each,
# alternating, ROUNDS rounds, medians. Usage, from the repository
# root, with the CIFAR-10 JPEGs unpacked in DIR
# (tar xzf ../shared/data/cifar10-jpeg-full.tar.gz -C DIR):
#   bash experiments/streaming_input/run.sh DIR [ROUNDS]
set -eu
DATA=${1:?usage: run.sh JPEG_DIR [ROUNDS]}
ROUNDS=${2:-5}
POOL_COMMIT=7120ad2  # the thread-pool loader's baseline, checked out as is
ROOT=$(pwd)
TMP=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$TMP/pool"; rm -rf "$TMP"' EXIT
git worktree add --quiet --detach "$TMP/pool" "$POOL_COMMIT"
COMMON=(--dataset=image_folder "--data_dir=$DATA" --image_size=224
        --batch_size=128 --steps=20)

for round in $(seq "$ROUNDS"); do
  # Each version imported from its own tree, not the installed one.
  (cd "$TMP/pool" && PYTHONPATH="$TMP/pool" python -m vit_jax.benchmark_input \
     "${COMMON[@]}" --threads=0) | tail -1 >> "$TMP/pool.jsonl"
  PYTHONPATH="$ROOT" python -m vit_jax.benchmark_input "${COMMON[@]}" \
     --workers=0,-1 --rounds=1 | tail -1 >> "$TMP/grain.jsonl"
  echo "round $round done"
done

python - "$TMP" "$ROUNDS" <<'PY'
import json, os, statistics, sys
tmp, rounds = sys.argv[1], sys.argv[2]
def lines(name):
  with open(os.path.join(tmp, name)) as f:
    return [json.loads(line) for line in f]
rates = {f'thread pool, {os.cpu_count()} threads (before)':
         [r['images_per_second'] for r in lines('pool.jsonl')]}
for run in lines('grain.jsonl'):
  for r in run['results']:
    rates.setdefault(f'grain, {r["loader"]}', []).append(r['images_per_second'])
print(f'\nTraining images/s, 224px, batch 128, 20 steady batches after one, '
      f'{os.cpu_count()} CPUs, median of {rounds} alternating rounds')
for name, values in rates.items():
  print(f'{name:<40} {statistics.median(values):8.1f}   '
        f'(runs: {", ".join(f"{v:.0f}" for v in values)})')
PY

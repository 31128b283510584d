r"""Our ViT-Tiny train step against timm's VisionTransformer, on this machine.

  python experiments/benchmarks/compare_pytorch.py \
      --torch_python=../torch_venv/bin/python --rounds=3 --steps=10

Our contenders (`python -m vit_jax.benchmark`, on 1 and 4 host devices) run
under this Python; the PyTorch ones in `timm_worker` under `--torch_python`, a
venv with torch and timm that the project does not depend on. timm's model is
configured as ViT-Tiny-CIFAR_4 (`timm_worker.timm_vit` asserts its parameters,
norms and dropouts); each round runs every contender in a fresh process,
alternating order: batch 128, float32, AdamW, eager and torch.compile. Writes
the runs and medians to --output and prints a table.
"""

import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
# Runs from a checkout, installed or not.
sys.path.insert(0, str(REPO))

# pylint: disable=g-import-not-at-top,wrong-import-position
from experiments.benchmarks import study_step
from experiments.benchmarks import timm_worker
# pylint: enable=g-import-not-at-top,wrong-import-position

BATCH = 128
# Each PyTorch mode's `timm_worker.COMPILED`.
TORCH_MODES = {'eager': 'nothing', 'compile': 'step'}
# ViT-Tiny-CIFAR_4, its parameters as tests/test_models_registry.py counts.
VIT_TINY_CIFAR = timm_worker.Architecture(
    image=32, patch=4, hidden=128, layers=6, heads=4, mlp=512, classes=10,
    dropout=0.1, parameters=1_205_898)
# Our step of ViT-Tiny-CIFAR_4 (main_vs_step.py's too).
BENCHMARK = [
    sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
    f'--batch_size={BATCH}', '--image_size=32'
]


def timm_run(torch_python: str, mode: str, steps: int) -> dict:
  """timm's step in `mode` (TORCH_MODES), timed in a fresh worker."""
  worker = timm_worker.TimmWorker(torch_python)
  try:
    worker.send(op='prepare', name=mode, architecture=VIT_TINY_CIFAR._asdict(),
                batch=BATCH, compiled=TORCH_MODES[mode], dtype='float32')
    warmup_seconds = worker.receive()['warmup_seconds']
    worker.send(op='time', name=mode, steps=steps)
    seconds = statistics.median(worker.receive()['seconds'])
  finally:
    worker.close()
  return {
      'images_per_second': BATCH / seconds, 'ms_per_step': 1000 * seconds,
      'warmup_seconds': warmup_seconds, 'threads': worker.threads, 'version':
          worker.versions['torch'], 'timm_version': worker.versions['timm'],
      'parameters': VIT_TINY_CIFAR.parameters,
  }


def run(command: list[str]) -> dict:
  """The JSON line `command` prints last."""
  stdout, stderr, failed = study_step.run(command)
  if failed:
    raise RuntimeError(f'{" ".join(command)} failed:\n{stderr[-3000:]}')
  return json.loads(stdout.strip().splitlines()[-1])


def contenders(steps: int, torch_python: str, torch_modes: list[str]) -> dict:
  """Each contender's name and a function that runs it once."""
  ours = BENCHMARK + [f'--steps={steps}', '--noaugment']
  names = {
      'eager': 'PyTorch (timm) eager', 'compile': 'PyTorch (timm) torch.compile'
  }
  return {
      'vit_jax, 1 CPU device': lambda: run(ours + ['--cpu_devices=1']),
      'vit_jax, 4 host devices (default)': lambda: run(
          ours + ['--cpu_devices=4'
                 ]), **{
                     names[mode]: lambda m=mode: timm_run(
                         torch_python, m, steps) for mode in torch_modes
                 },
  }


def main():
  parser = study_step.parser(__doc__, rounds=3, steps=10)
  parser.add_argument(
      '--torch_python', default=sys.executable,
      help='Python with torch and timm that runs the PyTorch '
      'workers (default: this one).')
  parser.add_argument('--torch_modes', default=','.join(TORCH_MODES),
                      help='Comma-separated PyTorch modes to run.')
  parser.add_argument('--output', type=pathlib.Path,
                      default=HERE / 'pytorch_comparison.json')
  args = parser.parse_args()
  torch_modes = [m for m in args.torch_modes.split(',') if m]
  if not torch_modes or set(torch_modes) - set(TORCH_MODES):
    parser.error(f'--torch_modes: a subset of {",".join(TORCH_MODES)}')
  runs = contenders(args.steps, args.torch_python, torch_modes)
  results = {name: [] for name in runs}
  for round_number, name in study_step.rounds(runs, args.rounds):
    result = runs[name]()
    rate = result.get('images_per_second',
                      result.get('train_images_per_second'))
    results[name].append({**result, 'images_per_second': rate})
    print(f'round {round_number}: {name}: {rate:.1f} img/s', flush=True)

  medians = {
      name: statistics.median(r['images_per_second'] for r in rs)
      for name, rs in results.items()
  }
  best_torch = max(v for k, v in medians.items() if k.startswith('PyTorch'))
  study_step.write_json(
      args.output, {
          'rounds': args.rounds, 'steps': args.steps, 'pythons': {
              'vit_jax': sys.executable, 'pytorch': args.torch_python
          }, 'pytorch_model': 'timm VisionTransformer (ViT-Tiny-CIFAR_4 '
                              'config)', 'median_images_per_second': medians,
          'ours_over_best_pytorch': {
              k: v / best_torch
              for k, v in medians.items() if k.startswith('vit_jax')
          }, 'runs': results
      })
  print()
  study_step.print_table(
      ('step (ViT-Tiny-CIFAR_4, batch 128, f32, AdamW)', 'median img/s',
       'ours / best PyTorch'),
      ((name, f'{rate:.1f}',
        f'{rate / best_torch:.2f}' if name.startswith('vit_jax') else '')
       for name, rate in medians.items()))


if __name__ == '__main__':
  main()

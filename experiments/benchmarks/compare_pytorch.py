"""Our ViT-Tiny train step against timm's VisionTransformer, on this machine."""
import contextlib
import functools
import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
# Runs from a checkout, installed or not.
sys.path.insert(0, str(HERE.parents[1]))

# pylint: disable=g-import-not-at-top,wrong-import-position
from experiments import runs
from experiments.benchmarks import study_step
from experiments.benchmarks import timm_worker
# pylint: enable=g-import-not-at-top,wrong-import-position

BATCH = 128
# What `timm_worker.train_step` compiles in each PyTorch mode, and its name
# in the table.
TORCH_MODES = {'eager': 'nothing', 'compile': 'step'}
TORCH_NAMES = {'eager': 'eager', 'compile': 'torch.compile'}
# ViT-Tiny-CIFAR_4, its parameters as tests/test_models_registry.py counts.
VIT_TINY_CIFAR = dict(image=32, patch=4, hidden=128, layers=6, heads=4, mlp=512,
                      classes=10, dropout=0.1, parameters=1_205_898)
# Our step of ViT-Tiny-CIFAR_4 (main_vs_step.py's too).
BENCHMARK = [
    sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
    f'--batch_size={BATCH}', '--image_size=32'
]


def timm_run(torch_python: str, mode: str, steps: int) -> dict:
  """timm's step in `mode` (TORCH_MODES), timed in a fresh worker."""
  with contextlib.closing(timm_worker.TimmWorker(torch_python)) as worker:
    worker.send(op='prepare', name=mode, architecture=VIT_TINY_CIFAR,
                batch=BATCH, compiled=TORCH_MODES[mode], dtype='float32')
    warmup_seconds = worker.receive()['warmup_seconds']
    worker.send(op='time', name=mode, steps=steps)
    seconds = statistics.median(worker.receive()['seconds'])
  return dict(images_per_second=BATCH / seconds, ms_per_step=1000 * seconds,
              warmup_seconds=warmup_seconds, threads=worker.threads,
              version=worker.versions['torch'],
              timm_version=worker.versions['timm'],
              parameters=VIT_TINY_CIFAR['parameters'])


def run(command: list[str]) -> dict:
  """The JSON line `command` prints last."""
  stdout, stderr, failed = study_step.run(command)
  if failed:
    raise RuntimeError(f'{" ".join(command)} failed:\n{stderr[-3000:]}')
  return json.loads(stdout.strip().splitlines()[-1])


def main():
  parser = study_step.parser(__doc__, rounds=3, steps=10)
  parser.add_argument(
      '--torch_python', default=sys.executable, help='Python with torch '
      'and timm that runs the PyTorch workers (default: this one).')
  parser.add_argument('--torch_modes', default=','.join(TORCH_MODES),
                      help='Comma-separated PyTorch modes to run.')
  parser.add_argument('--output', type=pathlib.Path,
                      default=HERE / 'pytorch_comparison.json')
  args = parser.parse_args()
  torch_modes = [m for m in args.torch_modes.split(',') if m]
  if not torch_modes or set(torch_modes) - set(TORCH_MODES):
    parser.error(f'--torch_modes: a subset of {",".join(TORCH_MODES)}')
  ours = BENCHMARK + [f'--steps={args.steps}', '--noaugment']
  each = {
      f'vit_jax, {label}': functools.partial(run, ours + [f'--cpu_devices={n}'])
      for n, label in ((1, '1 CPU device'), (4, '4 host devices (default)'))
  }
  for mode in torch_modes:
    each[f'PyTorch (timm) {TORCH_NAMES[mode]}'] = functools.partial(
        timm_run, args.torch_python, mode, args.steps)
  results = {name: [] for name in each}
  for round_number, name in study_step.rounds(each, args.rounds):
    result = each[name]()
    rate = result.get('images_per_second',
                      result.get('train_images_per_second'))
    results[name].append({**result, 'images_per_second': rate})
    print(f'round {round_number}: {name}: {rate:.1f} img/s', flush=True)

  medians = {
      name: statistics.median(r['images_per_second'] for r in rs)
      for name, rs in results.items()
  }
  best_torch = max(v for k, v in medians.items() if k.startswith('PyTorch'))
  ratios = {k: v / best_torch for k, v in medians.items() if 'vit_jax' in k}
  pythons = {'vit_jax': sys.executable, 'pytorch': args.torch_python}
  study_step.write_json(
      args.output,
      dict(rounds=args.rounds, steps=args.steps, pythons=pythons,
           pytorch_model='timm VisionTransformer (ViT-Tiny-CIFAR_4 config)',
           median_images_per_second=medians, ours_over_best_pytorch=ratios,
           runs=results))
  print('\n' + runs.markdown_table([
      'step (ViT-Tiny-CIFAR_4, batch 128, f32, AdamW)', 'median img/s',
      'ours / best PyTorch'
  ], [[name, f'{rate:.1f}', f'{ratios[name]:.2f}' if name in ratios else '']
      for name, rate in medians.items()]))


if __name__ == '__main__':
  main()

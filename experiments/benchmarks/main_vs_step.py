r"""Does the training job run at the speed of its step? The training images/s
`vit_jax.main` reports for the study's ViT (epochs after the first) against
`vit_jax.benchmark`'s of the same step, in alternating fresh processes.

  python experiments/benchmarks/main_vs_step.py \
      --data_dir=../shared/data/cifar10-5k --rounds=3 --epochs=3

Writes `main_vs_step.json` and prints the medians and their ratio.
"""

import argparse
import datetime
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

from experiments.benchmarks import study_step

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main_job_rates(data_dir: str, epochs: int) -> list[float]:
  with tempfile.TemporaryDirectory() as workdir:
    subprocess.run([
        sys.executable, '-m', 'vit_jax.main', '--config=configs/cifar_small.py',
        f'--workdir={workdir}', f'--config.data_dir={data_dir}',
        f'--config.num_epochs={epochs}'
    ], cwd=ROOT, check=True, capture_output=True, text=True)
    records = [
        json.loads(line) for line in (pathlib.Path(workdir) /
                                      'metrics.jsonl').read_text().splitlines()
    ]
  return [r['images_per_second'] for r in records
          if 'images_per_second' in r][1:]


def step_rate(steps: int) -> float:
  out = subprocess.run([
      sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
      '--batch_size=128', '--image_size=32', f'--steps={steps}'
  ], cwd=ROOT, check=True, capture_output=True, text=True)
  return json.loads(
      out.stdout.strip().splitlines()[-1])['train_images_per_second']


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--data_dir', required=True,
                      help='The study subset (cifar10-5k).')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--epochs', type=int, default=3)
  parser.add_argument('--steps', type=int, default=20)
  args = parser.parse_args()
  data_dir = str(pathlib.Path(args.data_dir).resolve())

  main_rates, step_rates = [], []
  for round_index in range(args.rounds):
    order = ('main', 'step') if round_index % 2 == 0 else ('step', 'main')
    for name in order:
      if name == 'main':
        rates = main_job_rates(data_dir, args.epochs)
        main_rates.extend(rates)
        print(
            f'round {round_index + 1}: vit_jax.main epochs: '
            f'{", ".join(f"{r:.1f}" for r in rates)} img/s', flush=True)
      else:
        step_rates.append(step_rate(args.steps))
        print(
            f'round {round_index + 1}: vit_jax.benchmark: '
            f'{step_rates[-1]:.1f} img/s', flush=True)

  main_median = statistics.median(main_rates)
  step_median = statistics.median(step_rates)
  summary = {
      'date': datetime.date.today().isoformat(), 'rounds': args.rounds,
      'epochs': args.epochs, 'main_images_per_second': main_rates,
      'benchmark_images_per_second': step_rates, 'main_median': main_median,
      'benchmark_median': step_median, 'ratio': main_median / step_median,
  }
  (HERE / 'main_vs_step.json').write_text(json.dumps(summary, indent=2))
  print()
  study_step.print_table(
      ('training images/s (ViT-Tiny-CIFAR_4, batch 128, augmented)', 'median'),
      [(f'`vit_jax.main`, epochs 2-{args.epochs} of each run',
        f'{main_median:.1f}'),
       ('`vit_jax.benchmark`, the same step', f'{step_median:.1f}'),
       ('ratio', f'{main_median / step_median:.3f}')])


if __name__ == '__main__':
  main()

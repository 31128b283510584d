"""Does `vit_jax.main` train the study's ViT at `vit_jax.benchmark`'s speed?"""

import pathlib
import statistics

from experiments import runs
from experiments.benchmarks import compare_pytorch
from experiments.benchmarks import study_step

HERE = pathlib.Path(__file__).resolve().parent


def main_job_rates(data_dir: pathlib.Path, epochs: int) -> list[float]:
  run = study_step.run_study(data_dir, {'num_epochs': epochs})
  if 'failed' in run:
    raise RuntimeError(f'vit_jax.main: {run["failed"]}')
  return [
      r['images_per_second'] for r in run['records'] if 'images_per_second' in r
  ][1:]


def main():
  parser = study_step.parser(__doc__, rounds=3, epochs=3, steps=20)
  parser.add_argument('--data_dir', type=pathlib.Path, required=True,
                      help='The study subset (cifar10-5k).')
  args = parser.parse_args()
  step = compare_pytorch.BENCHMARK + [f'--steps={args.steps}']
  main_rates, step_rates = [], []
  for round_number, name in study_step.rounds(('main', 'step'), args.rounds):
    if name == 'main':
      rates = main_job_rates(args.data_dir.resolve(), args.epochs)
      main_rates.extend(rates)
      said = f'vit_jax.main epochs: {", ".join(f"{r:.1f}" for r in rates)}'
    else:
      step_rates.append(compare_pytorch.run(step)['train_images_per_second'])
      said = f'vit_jax.benchmark: {step_rates[-1]:.1f}'
    print(f'round {round_number}: {said} img/s', flush=True)

  main_median, step_median = map(statistics.median, (main_rates, step_rates))
  study_step.write_json(
      HERE / 'main_vs_step.json',
      dict(rounds=args.rounds, epochs=args.epochs,
           main_images_per_second=main_rates,
           benchmark_images_per_second=step_rates, main_median=main_median,
           benchmark_median=step_median, ratio=main_median / step_median))
  print('\n' + runs.markdown_table(
      ['training images/s (ViT-Tiny-CIFAR_4, batch 128, augmented)', 'median'],
      [[
          f'`vit_jax.main`, epochs 2-{args.epochs} of each run',
          f'{main_median:.1f}'
      ], ['`vit_jax.benchmark`, the same step', f'{step_median:.1f}'],
       ['ratio', f'{main_median / step_median:.3f}']]))


if __name__ == '__main__':
  main()

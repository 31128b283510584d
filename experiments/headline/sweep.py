r"""The headline under the protocol: the best 100-epoch ViT recipe (distilled
from and guided by the SmallResNet, fine-tuned from a 300-epoch MAE
pre-training) against the SmallResNet it learns from, 5 seeds each, and two
controls: the same ViT recipe with no CNN anywhere, and the SmallResNet
trained for as many FLOPs as the ViT's whole chain (pre-training, teacher,
fine-tuning: stage 3 reads them from stage 2's summaries). Every run holds
out 5,000 validation images (`python -m experiments.held_out`) and is chosen
on them. One `vit_jax.main` command per run:

  for stage in 1 2 3; do
    python -m experiments.headline.sweep --validation_dir=/tmp/held_out \
        --stage=$stage | xargs -d '\n' -P 1 -n 1 sh -c
  done
"""

import pathlib
import sys

from experiments import runs
from experiments.data_efficiency import recipes as r
from experiments.data_efficiency import sweep as data_efficiency

EPOCHS = 100
VIT = r.BEST + ('trivial_augment', 'resnet_teacher', 'long_mae')
NO_CNN = ('trivial_augment', 'long_mae')
CNN = r.TEACHERS['resnet_teacher']  # (model, ingredients)


def stage_runs(stage: int, seeds: list[int]) -> list[tuple]:
  """(model, ingredients, epochs, seed) of a stage's runs; stage 3's epochs
  are filled in by `flops_matched`."""
  if stage == 3:
    return [(*CNN, None, seed) for seed in seeds]
  rows = [(('vit', VIT), seed) for seed in seeds] + [(('vit', NO_CNN), seed)
                                                     for seed in seeds]
  read = list(
      dict.fromkeys(
          tuple(source[1:]) for (model, ingredients), seed in rows
          for source in r.source_runs(ingredients, EPOCHS, seed)))
  if stage == 1:
    return read
  return [(model, ingredients, EPOCHS, seed)
          for (model, ingredients), seed in rows]


def flops_matched(workdir: pathlib.Path, seed: int) -> int:
  """The CNN's epochs whose FLOPs equal the ViT chain's of `seed`."""
  chain = [
      (model, ingredients, EPOCHS, seed)
      for model, ingredients in [('vit', VIT)]
  ] + [tuple(source[1:]) for source in r.source_runs(VIT, EPOCHS, seed)]
  cnn = (*CNN, EPOCHS, seed)
  summaries = {}
  for run in dict.fromkeys(chain + [cnn]):
    path = workdir / r.run_name(*run) / 'summary.json'
    if not path.exists():
      sys.exit(f'error: {path} is missing: run stages 1 and 2 first.')
    summaries[run] = runs.read_json(path)
  per_epoch = summaries[cnn]['train_flops'] / EPOCHS
  return round(
      sum(summaries[run]['train_flops']
          for run in dict.fromkeys(chain)) / per_epoch)


def main(argv=None):
  parser = runs.sweep_parser(__doc__, '/tmp/headline', missing=False)
  parser.add_argument(
      '--validation_dir', required=True,
      help='The held-out CIFAR-10 images (experiments.held_out).')
  parser.add_argument('--stage', type=int, choices=(1, 2, 3), required=True)
  parser.add_argument('--seeds', type=runs.integers, default='0,1,2,3,4')
  args = parser.parse_args(argv)
  planned = stage_runs(args.stage, args.seeds)
  if args.stage == 3:
    planned = [(model, ingredients, flops_matched(args.workdir, seed), seed)
               for model, ingredients, _, seed in planned]
  validation = {
      'validation_examples': 5000, 'validation_dir': args.validation_dir
  }
  runs.emit([
      runs.command(
          args.workdir / r.run_name(*run),
          f'configs/data_efficient.py:{run[0]}', {
              **data_efficiency.overrides(args.workdir, args.data_dir, *run),
              **validation
          }) for run in planned
  ], args.slurm)


if __name__ == '__main__':
  main()

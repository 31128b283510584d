r"""The headline under the protocol: the best 100-epoch ViT recipe against
the best CNN recipe, each chosen on validation among data_efficiency's top
rows, 5 seeds each, and two controls: the best ViT recipe with no CNN
anywhere, and the chosen CNN trained for as many FLOPs as the chosen ViT's
whole chain (pre-training, teacher, fine-tuning: stage 3 chooses and reads
them from the summaries). Every run holds out 5,000 validation images
(`python -m experiments.held_out`) and picks its epoch on them. One
`vit_jax.main` command per run:

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
# Candidates: data_efficiency's top rows at 100 epochs (ranked there on the
# test split); the summary and stage 3 choose among them on validation.
VITS = [
    data_efficiency.BEST_TA + extra for extra in ((), ('mae',), ('long_mae',))
]
CNNS = [r.TEACHERS['resnet_teacher'], ('simple_cnn', ('trivial_augment',))]
# What a CNN teaches a ViT recipe: gone from the no-CNN control.
_FROM_A_CNN = ('distillation', 'locality_guidance', 'resnet_teacher')


def stage_runs(stage: int, seeds: list[int]) -> list[tuple]:
  """(model, ingredients, epochs, seed) of stage 1's runs (those others read)
  or stage 2's (the rest of the candidates)."""
  rows = [(('vit', ingredients), seed) for seed in seeds
          for ingredients in VITS]
  rows += [(cnn, seed) for seed in seeds for cnn in CNNS]
  read = list(
      dict.fromkeys(
          tuple(source[1:]) for (model, ingredients), seed in rows
          for source in r.source_runs(ingredients, EPOCHS, seed)))
  planned = [(model, ingredients, EPOCHS, seed)
             for (model, ingredients), seed in rows]
  return read if stage == 1 else [run for run in planned if run not in read]


def _summary(workdir: pathlib.Path, run: tuple) -> dict:
  path = workdir / r.run_name(*run) / 'summary.json'
  if not path.exists():
    sys.exit(f'error: {path} is missing: run stages 1 and 2 first.')
  return runs.read_json(path)


def chosen(workdir: pathlib.Path, rows: list[tuple],
           seeds: list[int]) -> tuple[str, tuple[str, ...]]:
  """The (model, ingredients) row with the best validation accuracy, summed
  over `seeds`."""
  return max(
      rows, key=lambda row: sum(
          _summary(workdir, (*row, EPOCHS, seed))['best_validation_accuracy']
          for seed in seeds))


def flops_matched(workdir: pathlib.Path, vit: tuple[str, ...],
                  cnn: tuple[str, tuple[str, ...]], seed: int) -> int:
  """The CNN's epochs whose FLOPs equal the ViT chain's of `seed`."""
  chain = dict.fromkeys(
      [('vit', vit, EPOCHS, seed)] +
      [tuple(source[1:]) for source in r.source_runs(vit, EPOCHS, seed)])
  per_epoch = _summary(workdir, (*cnn, EPOCHS, seed))['train_flops'] / EPOCHS
  return round(
      sum(_summary(workdir, run)['train_flops'] for run in chain) / per_epoch)


def main(argv=None):
  parser = runs.sweep_parser(__doc__, '/tmp/headline', missing=False)
  parser.add_argument(
      '--validation_dir', required=True,
      help='The held-out CIFAR-10 images (experiments.held_out).')
  parser.add_argument('--stage', type=int, choices=(1, 2, 3), required=True)
  parser.add_argument('--seeds', type=runs.integers, default='0,1,2,3,4')
  args = parser.parse_args(argv)
  if args.stage == 3:  # the controls of the rows chosen
    _, vit = chosen(args.workdir, [('vit', v) for v in VITS], args.seeds)
    cnn = chosen(args.workdir, CNNS, args.seeds)
    no_cnn = tuple(i for i in vit if i not in _FROM_A_CNN)
    planned = [(*cnn, flops_matched(args.workdir, vit, cnn, seed), seed)
               for seed in args.seeds] + [('vit', no_cnn, EPOCHS, seed)
                                          for seed in args.seeds]
  else:
    planned = stage_runs(args.stage, args.seeds)
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

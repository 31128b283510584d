"""The data-efficiency runs in two stages, a command a line (README.md)."""

import pathlib

from experiments import runs
from experiments.data_efficiency import recipes as r

HERE = pathlib.Path(__file__).resolve().parent


def _vit(recipes: list[tuple[str, ...]]) -> list[tuple]:
  return [('vit', ingredients) for ingredients in recipes]


# The rows of both comparison budgets: the ViT's rounds one and two, and the
# CNNs' recipes.
_COMPARED = _vit(r.CUMULATIVE + r.ON_STUDY + r.ROUND_TWO) + [
    (model, ingredients) for model in r.CNNS
    for ingredients in [r.CUMULATIVE[0], r.CNN_AUGMENTED] + r.CNN_ROUND_THREE
]
_BEST_TA = r.BEST + ('trivial_augment', 'resnet_teacher')
TOP_VIT = [_BEST_TA, _BEST_TA + ('mae',), _BEST_TA + ('long_mae',)]
_RESNET_TA = ('small_resnet', ('trivial_augment',))
# The rows seeded at 30 and 100 epochs alike.
_SEEDED = _vit([(), ('distillation',), r.BEST, r.ALL]) + [(model, ())
                                                          for model in r.CNNS]
# Per budget: its rows, and those of them with seeds 1 and 2 besides 0 (the
# rows the conclusion rests on, as seed 0 ranked them). The long budgets
# train the best rows of the last comparison budget: at 300 epochs the two
# best ViT recipes and each CNN's best; at 1,000 the best ViT recipe and
# the best CNN, seed 0.
ROWS = {
    30: (_COMPARED + _vit(r.ROUND_THREE_FIRST_BUDGET), _SEEDED +
         _vit([('locality_guidance', 'mae'),
               ('locality_guidance', 'long_mae'), r.BEST + ('long_mae',)])),
    100: (_COMPARED + _vit(r.ROUND_THREE), _SEEDED + _vit([
        r.BEST + ('soft_distillation',), r.BEST + ('trivial_augment',), *TOP_VIT
    ]) + [_RESNET_TA]), 300: ([('simple_cnn', ()), _RESNET_TA,
                               ('vit', TOP_VIT[2]), ('vit', TOP_VIT[1])], 'all'
                             ), 1000: ([_RESNET_TA, ('vit', TOP_VIT[1])], []),
}


def planned_runs() -> tuple[list[tuple], list[tuple]]:
  """(model, ingredients, epochs, seed) of the runs others read; the rest."""
  rows = [(model, ingredients, epochs, seed)
          for epochs, (all_rows, seeded) in ROWS.items() for seed in (0, 1, 2)
          for model, ingredients in all_rows
          if seed == 0 or seeded == 'all' or (model, ingredients) in seeded]
  read = r.read_by(rows)
  return read, [run for run in dict.fromkeys(rows) if run not in read]


def overrides(workdir: pathlib.Path, data_dir: pathlib.Path, model: str,
              ingredients: tuple[str, ...], epochs: int, seed: int) -> dict:
  """A run's config changes: its recipe's, and the runs it reads."""
  sources = r.source_runs(ingredients, epochs, seed)
  return {
      'num_epochs': epochs, 'seed': seed, 'data_dir': data_dir,
      **r.recipe_overrides(model, ingredients, epochs),
      **{field: workdir / r.run_name(*source) for field, *source in sources}
  }


def main(argv=None):
  parser = runs.parser(__doc__, '/tmp/data_efficiency', 'data_dir', 'slurm',
                       'missing')
  parser.add_argument(
      '--stage', type=int, choices=(1, 2), help='1: the runs '
      'others read; 2: the rest; neither: both, in order.')
  args = parser.parse_args(argv)
  read, rest = planned_runs()
  if args.missing:  # and every run they read, whose checkpoint they need
    landed = runs.landed(HERE / 'results.json', r.record_name)
    missing = lambda run: r.run_name(*run) not in landed
    rest = list(filter(missing, rest))
    needed = set(r.read_by(rest))
    read = [run for run in read if run in needed or missing(run)]
  runs.emit([
      runs.command(args.workdir / r.run_name(*run),
                   f'configs/data_efficient.py:{run[0]}',
                   overrides(args.workdir, args.data_dir, *run))
      for run in {1: read, 2: rest}.get(args.stage, read + rest)
  ], args.slurm)


if __name__ == '__main__':
  main()

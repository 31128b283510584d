r"""The small-data study's runs: ViT-Tiny against two CNNs on 5,000 CIFAR-10
images, `configs/cifar_small.py` for every model, recipe (random crop + flip
on or off) and seed, then the default recipe at other batch sizes (the
study does not state its own). Prints one `vit_jax.main` command per run:

  python -m experiments.small_data.sweep | xargs -d '\n' -P 2 -n 1 sh -c
"""

from experiments import runs

# Recipe -> config.augment; configs/cifar_small.py's default is the first.
RECIPES = {'augment': True, 'no_augment': False}


def run_name(model: str, recipe: str, seed: int,
             batch_size: int | None = None) -> str:
  batch = '' if batch_size is None else f'batch{batch_size}_'
  return f'{model}_{recipe}_{batch}seed{seed}'


def planned_runs(seeds, other_seeds, models, batch_size_runs):
  """(model, recipe, seed, batch size or None for the config's) of each run."""
  first, *rest = seeds
  for recipe_seeds, recipe in (([first], 'augment'),
                               (other_seeds, 'no_augment'), (rest, 'augment')):
    for seed in recipe_seeds:
      for model in models:
        yield model, recipe, seed, None
  for run in batch_size_runs:
    model, batch_size = run.split(':')
    if model in models:
      yield model, 'augment', first, int(batch_size)


def main(argv=None):
  parser = runs.sweep_parser(__doc__, '/tmp/small_data', missing=False)
  parser.add_argument('--seeds', type=runs.integers, default='0,1,2',
                      help='Seeds of the default recipe.')
  parser.add_argument('--other_seeds', type=runs.integers, default='0',
                      help='Seeds of the other recipe.')
  parser.add_argument('--models', default='vit,simple_cnn,small_resnet',
                      help='configs/cifar_small.py models.')
  parser.add_argument(
      '--batch_size_runs', default='simple_cnn:64,small_resnet:64,'
      'small_resnet:256', help="MODEL:BATCH runs of the default recipe "
      "(first seed) at batch sizes other than the config's.")
  args = parser.parse_args(argv)
  planned = planned_runs(args.seeds, args.other_seeds, args.models.split(','),
                         filter(None, args.batch_size_runs.split(',')))
  runs.emit([
      runs.command(
          args.workdir / run_name(model, recipe, seed, batch_size),
          f'configs/cifar_small.py:{model}', {
              'augment': RECIPES[recipe], 'seed': seed, 'data_dir':
                  args.data_dir,
              **({} if batch_size is None else {'batch_size': batch_size})
          }) for model, recipe, seed, batch_size in planned
  ], args.slurm)


if __name__ == '__main__':
  main()

"""The small-data study's runs, a `vit_jax.main` command a line (README.md)."""

from experiments import runs

# The config's runs, one per model, over SEEDS.
MODELS = ('vit', 'simple_cnn', 'small_resnet')
SEEDS = (0, 1, 2)

# Each unstated choice: name -> (model, its overrides of the config, the run
# it changes one thing of, its seeds: None for those of the config's runs).
# The config's batch sizes are the choices nearest the study; the pools and
# the stem were measured at batch 128.
# yapf: disable
CHOICES = {
    'vit_no_augment': ('vit', {'augment': False}, 'vit', (0,)),
    'simple_cnn_no_augment':
        ('simple_cnn', {'augment': False}, 'simple_cnn', (0,)),
    'simple_cnn_batch128':
        ('simple_cnn', {'batch_size': 128}, 'simple_cnn', None),
    'simple_cnn_batch32': ('simple_cnn', {'batch_size': 32}, 'simple_cnn', (0,)),
    'simple_cnn_batch128_pools_early':
        ('simple_cnn', {'batch_size': 128,
                        'model_overrides.pool_after': '(0, 2)'},
         'simple_cnn_batch128', (0,)),
    'small_resnet_no_augment':
        ('small_resnet', {'augment': False}, 'small_resnet', (0,)),
    'small_resnet_batch128':
        ('small_resnet', {'batch_size': 128}, 'small_resnet', None),
    'small_resnet_batch128_stem_stride':
        ('small_resnet', {'batch_size': 128, 'model_overrides.stem_stride': 2},
         'small_resnet_batch128', (0,)),
    'small_resnet_batch128_stem_pool':
        ('small_resnet', {'batch_size': 128, 'model_overrides.stem_pool': True},
         'small_resnet_batch128', (0,)),
}
# yapf: enable


def planned() -> dict[str, tuple[str, str, dict]]:
  """Run name -> (what it runs: a model or a choice, its model, overrides)."""
  plan = {f'{m}_seed{s}': (m, m, {'seed': s}) for s in SEEDS for m in MODELS}
  for name, (model, overrides, _, seeds) in CHOICES.items():
    for seed in seeds or SEEDS:
      plan[f'{name}_seed{seed}'] = name, model, {'seed': seed, **overrides}
  return plan


def main(argv=None):
  args = runs.parser(__doc__, '/tmp/small_data', 'data_dir', 'slurm',
                     'validation_dir').parse_args(argv)
  runs.emit([
      runs.command(
          args.workdir / name, f'configs/cifar_small.py:{model}', {
              **overrides, 'data_dir': args.data_dir,
              'validation_examples': 5000, 'validation_dir': args.validation_dir
          }) for name, (_, model, overrides) in planned().items()
  ], args.slurm)


if __name__ == '__main__':
  main()

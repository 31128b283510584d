r"""What the study leaves unstated about its CNNs, measured: batch size, where
SimpleCNN's pools sit and whether SmallResNet's stem downsamples (the
parameter counts unchanged), each at 30 epochs, chosen on 5,000 validation
images outside the study's 5,000 (`python -m experiments.held_out`). Prints
one `vit_jax.main` command per run:

  python -m experiments.study_cnns.sweep --validation_dir=/tmp/held_out \
      | xargs -d '\n' -P 1 -n 1 sh -c
"""

from experiments import runs

# name -> (model, overrides); the first of each model is the config's.
# yapf: disable
CHOICES = {
    'simple_cnn': ('simple_cnn', {}),
    'simple_cnn_batch64': ('simple_cnn', {'batch_size': 64}),
    'simple_cnn_batch32': ('simple_cnn', {'batch_size': 32}),
    'simple_cnn_pools_early':
        ('simple_cnn', {'model_overrides.pool_after': '(0, 2)'}),
    'small_resnet': ('small_resnet', {}),
    'small_resnet_batch256': ('small_resnet', {'batch_size': 256}),
    'small_resnet_stem_stride':
        ('small_resnet', {'model_overrides.stem_stride': 2}),
    'small_resnet_stem_pool':
        ('small_resnet', {'model_overrides.stem_pool': True}),
}
# yapf: enable


def main(argv=None):
  parser = runs.sweep_parser(__doc__, '/tmp/study_cnns', missing=False)
  parser.add_argument(
      '--validation_dir', required=True,
      help='The held-out CIFAR-10 images (experiments.held_out).')
  parser.add_argument('--seeds', type=runs.integers, default='0,1,2')
  parser.add_argument('--choices', default=','.join(CHOICES))
  args = parser.parse_args(argv)
  runs.emit([
      runs.command(
          args.workdir / f'{name}_seed{seed}',
          f'configs/cifar_small.py:{model}', {
              'seed': seed, 'data_dir': args.data_dir,
              'validation_examples': 5000, 'validation_dir':
                  args.validation_dir, **overrides
          }) for seed in args.seeds for name in args.choices.split(',')
      for model, overrides in [CHOICES[name]]
  ], args.slurm)


if __name__ == '__main__':
  main()

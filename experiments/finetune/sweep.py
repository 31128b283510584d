r"""Fine-tuning the small-data study's ViT-Tiny at a higher resolution: one
`vit_jax.main` command per resolution.

  python -m experiments.finetune.sweep \
      --pretrained=/tmp/small_data/vit_augment_seed0 | bash

--pretrained is a finished 30-epoch run of configs/cifar_small.py at 32x32
(experiments/small_data's sweep makes one). It is fine-tuned with
configs/finetune.py (the paper's recipe) at 48x48 and, as a control that
separates the resolution from the extra training, at 32x32.
"""

import pathlib

from experiments import runs


def main(argv=None):
  parser = runs.sweep_parser(__doc__, '/tmp/finetune', missing=False)
  parser.add_argument('--pretrained', type=pathlib.Path, required=True,
                      help='A finished configs/cifar_small.py ViT run.')
  parser.add_argument('--image_sizes', type=runs.integers, default='48,32',
                      help='Fine-tuning resolutions.')
  args = parser.parse_args(argv)
  runs.emit([
      runs.command(
          args.workdir / f'finetune_{size}', 'configs/finetune.py', {
              'init_from': args.pretrained, 'image_size': size,
              'data_dir': args.data_dir
          }) for size in args.image_sizes
  ], args.slurm)


if __name__ == '__main__':
  main()

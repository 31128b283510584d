r"""Fine-tuning the small-data study's 32x32 ViT-Tiny (--pretrained) with
configs/finetune.py at each of --image_sizes (32: the control, the training
without the resolution): one `vit_jax.main` command per size.

  python -m experiments.finetune.sweep \
      --pretrained=/tmp/finetune/pretrained | bash
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

"""Fine-tunings of a small-data ViT at --image_sizes, a command a line."""

import pathlib

from experiments import runs


def main(argv=None):
  parser = runs.parser(__doc__, '/tmp/finetune', 'data_dir', 'slurm')
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

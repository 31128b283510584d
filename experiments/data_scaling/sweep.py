"""The data-scaling runs on nested JPEG subsets, a command a line (README)."""

import pathlib
import shutil
import sys

from experiments import runs

HERE = pathlib.Path(__file__).resolve().parent
RECIPE = 'study'
# One batch size for every model and size, the one results.json holds.
BATCH_SIZE = 128


def subset(jpeg_dir: pathlib.Path, root: pathlib.Path,
           size: int) -> pathlib.Path:
  """Links to the first size/10 train images of each class and to the test."""
  directory = root / f'cifar10_{size}'
  done = directory / '.complete'
  if done.exists():
    return directory
  shutil.rmtree(directory, ignore_errors=True)  # an interrupted one
  per_class = size // 10
  for class_dir in sorted((jpeg_dir / 'train').iterdir()):
    images = sorted(class_dir.iterdir())
    if len(images) < per_class:
      sys.exit(f'error: {class_dir} has {len(images)} images, fewer than '
               f'the {per_class} a {size}-image subset needs.')
    runs.link(images[:per_class], directory / 'train' / class_dir.name)
  (directory / 'test').symlink_to((jpeg_dir / 'test').absolute())
  done.touch()
  return directory


def run_name(model: str, size: int, seed: int) -> str:
  return f'{model}_{RECIPE}_n{size}_seed{seed}'


def record_name(record: dict) -> str:
  return run_name(record['model'], record['train_examples'], record['seed'])


def parse(argv, doc: str = __doc__, summary: bool = False):
  """The flags, and the (model, size, seed) of each run they ask for."""
  parsing = runs.parser(doc, '/tmp/data_scaling',
                        *(() if summary else ('slurm', 'missing')))
  parsing.add_argument('--sizes', type=runs.integers,
                       default='5000,10000,25000,50000',
                       help='Training-set sizes, multiples of 10.')
  parsing.add_argument('--models', default='simple_cnn,small_resnet,vit',
                       help='configs/cifar_small.py models.')
  parsing.add_argument('--seeds', type=runs.integers, default='0',
                       help='Seeds of every (model, size).')
  if not summary:
    parsing.add_argument(
        '--jpeg_dir', type=pathlib.Path, default='/tmp/cifar10-jpeg',
        help='The unpacked cifar10-jpeg-full.tar.gz: train/<class>/NNNN.jpg, '
        'test/.')
  args = parsing.parse_args(argv)
  models = args.models.split(',')
  if not set(models) <= set(runs.NAMES):
    parsing.error(f'--models={args.models}: use some of '
                  f'{",".join(runs.NAMES)}.')
  if any(size % 10 for size in args.sizes):
    parsing.error('--sizes: use multiples of 10 (the subsets are '
                  'class-balanced), e.g. 5000,10000.')
  return args, [(model, size, seed) for size in args.sizes
                for seed in args.seeds for model in models]


def main(argv=None):
  args, planned = parse(argv)
  if not all((args.jpeg_dir / split).is_dir() for split in ('train', 'test')):
    sys.exit(f'error: no train/ and test/ in --jpeg_dir={args.jpeg_dir}; '
             'unpack ../shared/data/cifar10-jpeg-full.tar.gz there first.')
  done = runs.landed(HERE / 'results.json', record_name) if args.missing else {}
  runs.emit([
      runs.command(
          args.workdir / name, f'configs/cifar_small.py:{model}', {
              'dataset': 'image_folder', 'train_examples_per_file': 0,
              'test_examples': 0, 'seed': seed, 'batch_size': BATCH_SIZE,
              'data_dir': subset(args.jpeg_dir, args.workdir / 'data', size)
          }) for model, size, seed in planned
      if (name := run_name(model, size, seed)) not in done
  ], args.slurm)


if __name__ == '__main__':
  main()

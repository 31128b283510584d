"""CIFAR-10's training JPEGs outside the study; the study's, as JPEG folders."""

import argparse
import pathlib
import sys

import numpy as np

from experiments import runs
from vit_jax.data import cifar
from vit_jax.data import image_folder


def matched(subset: np.ndarray, jpegs: np.ndarray) -> np.ndarray:
  """The index of each subset image's JPEG; an error if any is unclear."""
  jpegs = jpegs.reshape(len(jpegs), -1).astype(np.float32)
  subset = subset.reshape(len(subset), jpegs.shape[1]).astype(np.float32)
  distances = ((subset**2).sum(1)[:, None] - 2 * subset @ jpegs.T +
               (jpegs**2).sum(1)[None])
  nearest = np.argsort(distances, axis=1)[:, :2]
  first, second = np.take_along_axis(distances, nearest, axis=1).T
  # Clear: a JPEG of its own, at under half the squared distance of the next.
  if len(set(nearest[:, 0])) < len(subset) or np.any(first > 0.5 * second):
    sys.exit('error: some subset images match no JPEG clearly: is --jpeg the '
             'JPEG copy of CIFAR-10?')
  return nearest[:, 0]


def _jpegs(folder: pathlib.Path) -> tuple[list[pathlib.Path], np.ndarray]:
  paths = sorted(folder.glob('*.jpg'))
  return paths, np.stack([image_folder.read_image(p) for p in paths])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--subset', type=pathlib.Path,
                      default='../shared/data/cifar10-5k')
  parser.add_argument(
      '--jpeg', type=pathlib.Path, required=True,
      help='The unpacked JPEG copy (train/ and test/, each <class>/*.jpg).')
  parser.add_argument('--out', type=pathlib.Path, required=True)
  parser.add_argument(
      '--study', type=pathlib.Path,
      help="Where to link the JPEG copies of the study's images, as "
      'train/<class>/ and test/<class>/: the study\'s subset as an image '
      'folder of the JPEG copy.')
  args = parser.parse_args(argv)
  for split in ('train', 'test') if args.study else ('train',):
    if not (args.jpeg / split).is_dir():
      sys.exit(f'error: no {split}/ in --jpeg={args.jpeg}: unpack the JPEG '
               'copy there first (the commands above).')
  runs.require_cifar10_subset(args.subset, '--subset')
  study = cifar.load_cifar('cifar10', args.subset)
  classes = sorted(p.name for p in (args.jpeg / 'train').iterdir())
  for label, name in enumerate(classes):
    paths, jpegs = _jpegs(args.jpeg / 'train' / name)
    used = set(matched(study.train.images[study.train.labels == label], jpegs))
    runs.link([path for i, path in enumerate(paths) if i not in used],
              args.out / name)
    print(f'{name}: {len(paths) - len(used)} of {len(paths)} held out')
    if args.study:
      runs.link([paths[i] for i in used], args.study / 'train' / name)
      paths, jpegs = _jpegs(args.jpeg / 'test' / name)
      twins = matched(study.test.images[study.test.labels == label], jpegs)
      runs.link([paths[i] for i in twins], args.study / 'test' / name)
  if args.study:
    print(f"The study's {len(study.train.labels)} training and "
          f'{len(study.test.labels)} test images as JPEG: {args.study}')


if __name__ == '__main__':
  main()

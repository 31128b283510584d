r"""CIFAR-10's 45,000 training images outside the small-data study's 5,000,
linked from the JPEG copy as <class>/ folders (`config.validation_dir`); the
full binary release needs none (`config.validation_examples` draws on it):

  tar xzf ../shared/data/cifar10-jpeg-full.tar.gz -C /tmp/cifar10-jpeg
  python -m experiments.held_out --jpeg=/tmp/cifar10-jpeg --out=/tmp/held_out
"""

import argparse
import pathlib
import sys

import numpy as np

from vit_jax.data import cifar
from vit_jax.data import image_folder


def matched(subset: np.ndarray, jpegs: np.ndarray) -> np.ndarray:
  """The index of each subset image's JPEG; an error if any is unclear."""
  subset = subset.reshape(len(subset), -1).astype(np.float32)
  jpegs = jpegs.reshape(len(jpegs), -1).astype(np.float32)
  distances = ((subset**2).sum(1)[:, None] - 2 * subset @ jpegs.T +
               (jpegs**2).sum(1)[None])
  nearest = np.argsort(distances, axis=1)[:, :2]
  first, second = np.take_along_axis(distances, nearest, axis=1).T
  # Clear: a JPEG of its own, at under half the squared distance of the next.
  if len(set(nearest[:, 0])) < len(subset) or np.any(first > 0.5 * second):
    sys.exit('error: some subset images match no JPEG clearly: is --jpeg the '
             'JPEG copy of CIFAR-10?')
  return nearest[:, 0]


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--subset', type=pathlib.Path,
                      default='../shared/data/cifar10-5k')
  parser.add_argument('--jpeg', type=pathlib.Path, required=True,
                      help='The unpacked JPEG copy (train/<class>/*.jpg).')
  parser.add_argument('--out', type=pathlib.Path, required=True)
  args = parser.parse_args(argv)
  if not (args.jpeg / 'train').is_dir():
    sys.exit(f'error: no train/ in --jpeg={args.jpeg}: unpack the JPEG copy '
             'there first (the commands above).')
  study = cifar.load_cifar('cifar10', args.subset).train
  classes = sorted(p.name for p in (args.jpeg / 'train').iterdir())
  for label, name in enumerate(classes):
    paths = sorted((args.jpeg / 'train' / name).glob('*.jpg'))
    jpegs = np.stack([image_folder.read_image(p) for p in paths])
    used = set(matched(study.images[study.labels == label], jpegs))
    folder = args.out / name
    folder.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(paths):
      if i not in used and not (folder / path.name).exists():
        (folder / path.name).symlink_to(path.resolve())
    print(f'{name}: {len(paths) - len(used)} of {len(paths)} held out')


if __name__ == '__main__':
  main()

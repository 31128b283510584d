"""What every dataset reader returns: a `Dataset` of two splits, each a
`Source` read by example index.

A leaf module (numpy only), so that the readers (`cifar`, `image_folder`,
`tfds_source`) and `sources.open_dataset`, which dispatches to them, all
import it without importing each other.
"""

from collections.abc import Callable
import dataclasses
from typing import Protocol

import numpy as np


class Source(Protocol):
  """Random access to a split: `source[i]` is (uint8 HxWx3 image, label)."""

  def __len__(self) -> int:
    ...

  def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
    ...


class ScalableSource(Source, Protocol):
  """A source of stored images that can decode one smaller than stored (a
  JPEG, by libjpeg's DCT scaling), for an input that shrinks it anyway."""

  def read(self, index: int,
           at_least: Callable[[tuple[int, int]], tuple[int, int]]
           ) -> tuple[np.ndarray, int, tuple[int, int]]:
    """(image, label, stored (height, width)) of example `index`: the image
    perhaps decoded smaller than stored, but never below `at_least(stored)`
    (height, width), which the caller decides from the stored size."""


def scalable(source: Source) -> bool:
  return hasattr(source, 'read')


@dataclasses.dataclass(frozen=True)
class ArraySource:
  """A split held in host memory as arrays."""
  images: np.ndarray  # uint8 (N, H, W, 3)
  labels: np.ndarray  # int32 (N,)

  def __len__(self):
    return len(self.labels)

  def __getitem__(self, index):
    return self.images[index], int(self.labels[index])


@dataclasses.dataclass(frozen=True)
class SubsetSource:
  """The examples of a source at `indices`, in that order."""
  source: Source
  indices: np.ndarray  # int

  def __len__(self):
    return len(self.indices)

  def __getitem__(self, index):
    return self.source[self._in_source(index)]

  def __getattr__(self, name):
    # ScalableSource's `read`, where the source has it.
    if name == 'read' and scalable(self.source):
      return lambda index, at_least: self.source.read(
          self._in_source(index), at_least)
    raise AttributeError(name)

  def _in_source(self, index) -> int:
    if not 0 <= index < len(self.indices):
      raise IndexError(index)
    return int(self.indices[index])

  @property
  def labels(self) -> np.ndarray:
    """The labels, where the source has them without decoding images."""
    return np.asarray(self.source.labels)[self.indices]


@dataclasses.dataclass(frozen=True)
class Dataset:
  train: Source
  test: Source
  num_classes: int
  # Whether each split lists its examples class by class (an image folder),
  # so that its first examples are of its first classes only: a subset is
  # then drawn across the classes (`sources.subset`), which needs the
  # split's `labels`. False: the order is mixed (the official CIFAR files,
  # tfds datasets), and a subset is the first examples.
  ordered_by_class: bool = False

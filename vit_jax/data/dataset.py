"""What every dataset reader returns: a `Dataset` of two splits, each a
`Source` read by example index.

A leaf module (numpy only), so that the readers (`cifar`, `image_folder`,
`tfds_source`) and `sources.open_dataset`, which dispatches to them, all
import it without importing each other.
"""

import dataclasses
from typing import Protocol

import numpy as np


class Source(Protocol):
  """Random access to a split: `source[i]` is (uint8 HxWx3 image, label)."""

  def __len__(self) -> int:
    ...

  def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
    ...


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
    if not 0 <= index < len(self.indices):
      raise IndexError(index)
    return self.source[int(self.indices[index])]

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

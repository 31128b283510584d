"""What every dataset reader returns: a `Dataset` of two indexed `Source`s."""

import dataclasses
import hashlib
from typing import Protocol

import numpy as np


class Source(Protocol):
  """Random access to a split: `source[i]` is (uint8 HxWx3 image, label)."""

  def __len__(self) -> int:
    ...

  def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
    ...


def scalable(source: Source) -> bool:
  """Whether `source.read(index, at_least)` decodes scaled to `at_least`."""
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
    return self.source[int(self.indices[index])]

  def __getattr__(self, name):
    if name == 'read' and scalable(self.source):
      return lambda index, at_least: self.source.read(int(self.indices[index]),
                                                      at_least)
    raise AttributeError(name)

  @property
  def labels(self) -> np.ndarray:
    """The labels, where the source has them without decoding images."""
    return np.asarray(self.source.labels)[self.indices]


def identity(source: Source) -> str | None:
  """A digest of the examples `source` holds; None where only decoding tells."""
  as_bytes = lambda numbers: np.asarray(numbers, np.int64).tobytes()
  held = None  # nothing tells its examples without decoding them
  if isinstance(source, SubsetSource):  # which of its pool's
    pool = identity(source.source)
    held = pool and [pool.encode(), as_bytes(source.indices)]
  elif isinstance(source, ArraySource):
    held = [source.images.tobytes(), as_bytes(source.labels)]
  elif hasattr(source, 'paths'):  # image files, by name wherever they lie
    names = '\n'.join(f'{p.parent.name}/{p.name}' for p in source.paths)
    held = [names.encode(), as_bytes(source.labels)]
  return held and hashlib.sha256(b'\0'.join(held)).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Dataset:
  train: Source
  test: Source
  num_classes: int
  # An image folder lists its examples class by class, so a subset is drawn
  # across the classes (`sources.subset`) rather than taken from the front.
  ordered_by_class: bool = False
  # Training examples the reader left out (CIFAR's beyond
  # train_examples_per_file): where validation examples come from.
  spare: Source | None = None
  validation: Source | None = None  # held out: chosen on, never trained on
  class_names: tuple[str, ...] = ()  # label i's name; () where none is known

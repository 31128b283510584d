"""Image folders: `data_dir/{train,test}/<class>/*.{jpg,jpeg,png}`, listed
once and decoded file by file when read."""

import dataclasses
import pathlib

import numpy as np

from vit_jax import files
from vit_jax.data.dataset import Dataset
from vit_jax.errors import DatasetError


def read_image(path: pathlib.Path) -> np.ndarray:
  """An image file as uint8 RGB."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as image:
      return np.asarray(image.convert('RGB'), dtype=np.uint8)
  except OSError as e:
    raise DatasetError(f'Cannot read image {path}: {e}') from e


@dataclasses.dataclass(frozen=True)
class FileSource:
  """Image files, decoded when read."""
  paths: list[pathlib.Path]
  labels: np.ndarray

  def __len__(self):
    return len(self.paths)

  def __getitem__(self, index):
    return read_image(self.paths[index]), int(self.labels[index])


def open_image_folder(data_dir: pathlib.Path) -> Dataset:
  """The image files under `data_dir/{train,test}/<class>/`, labelled by the
  index of their class folder among the sorted training classes."""
  train_dir = data_dir / 'train'
  class_names = sorted(p.name for p in train_dir.iterdir()
                       if p.is_dir()) if train_dir.is_dir() else []
  if not class_names or not (data_dir / 'test').is_dir():
    raise DatasetError(
        f'No image folder found in {data_dir}: expected '
        f'{data_dir}/train/<class>/*.jpg and {data_dir}/test/<class>/*.jpg.')

  def list_split(split: str) -> FileSource:
    paths, labels = [], []
    for folder in sorted((data_dir / split).iterdir()):
      if not folder.is_dir():
        continue
      if folder.name not in class_names:
        raise DatasetError(f'{folder}: class {folder.name!r} is not among the '
                           f'training classes {class_names}.')
      for path in sorted(folder.iterdir()):
        if files.is_image_file(path):
          paths.append(path)
          labels.append(class_names.index(folder.name))
    if not paths:
      raise DatasetError(f'No {"/".join(files.IMAGE_SUFFIXES)} images under '
                         f'{data_dir / split}.')
    return FileSource(paths, np.asarray(labels, np.int32))

  return Dataset(list_split('train'), list_split('test'), len(class_names))

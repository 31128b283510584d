"""Image folders `data_dir/{train,test}/<class>/*.{jpg,jpeg,png}`."""

from collections.abc import Callable
import dataclasses
import os
import pathlib
import struct

from absl import logging
import numpy as np
from PIL import Image
from PIL import UnidentifiedImageError

from vit_jax import errors
from vit_jax.data.dataset import Dataset
from vit_jax.data.dataset import SubsetSource
from vit_jax.errors import DatasetError
from vit_jax.runtime import files

# Transparent pixels are shown on white, as a browser shows them; the colour
# stored under them is arbitrary (often black).
BACKGROUND = 255

# Modes deeper than 8 bits, and the value each shows as white (mode I is a
# 16-bit PNG as some Pillows read it).
_WHITE_LEVELS = dict.fromkeys(
    ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I'), 65535) | {'F': 1.0}
_ALPHA_MODES = ('LA', 'PA', 'RGBA', 'RGBa')
_DECODED_MODES = ('1', 'L', 'P', 'RGB', 'RGBX', 'YCbCr', 'CMYK', *_ALPHA_MODES,
                  *_WHITE_LEVELS)

# How a whole JPEG or PNG file starts and ends; one cut short lacks the end.
_WHOLE_FILES = ((b'\xff\xd8\xff', b'\xff\xd9'), (b'\x89PNG\r\n\x1a\n',
                                                 b'IEND\xaeB`\x82'))


class _NotDecoded(Exception):
  """An image in a mode `to_rgb` does not decode."""


# What PIL's plugins raise on a malformed file.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError,
                  struct.error, Image.DecompressionBombError, _NotDecoded)
# The decoded (height, width) wanted of a stored (height, width).
Sizes = Callable[[tuple[int, int]], tuple[int, int]]


def _on_background(rgba: np.ndarray) -> np.ndarray:
  """RGBA pixels composited on BACKGROUND as uint8 RGB."""
  rgb, alpha = rgba[..., :3].astype(np.uint32), rgba[..., 3:].astype(np.uint32)
  return ((rgb * alpha + BACKGROUND * (255 - alpha) + 127) // 255).astype(
      np.uint8)


def to_rgb(image: Image.Image) -> np.ndarray:
  """A PIL image as uint8 RGB, as a viewer shows it (on BACKGROUND)."""
  # EXIF orientation is not applied, as the official `tf.image.decode_jpeg`
  # does not: a fine-tuned model sees the same pixels.
  if image.mode not in _DECODED_MODES:
    raise _NotDecoded(f'its mode {image.mode} is not one this reader decodes '
                      '(save it as RGB)')
  if image.mode in _WHITE_LEVELS:
    values = np.asarray(image, np.float64) / _WHITE_LEVELS[image.mode]
    grey = np.round(np.clip(values, 0, 1) * 255).astype(np.uint8)
    # Opaque without a transparent value.
    alpha = np.where(
        np.asarray(image) == image.info.get('transparency'), 0, 255)
    return _on_background(np.stack([grey] * 3 + [alpha], axis=-1))
  if image.mode in _ALPHA_MODES or 'transparency' in image.info:
    return _on_background(np.asarray(image.convert('RGBA')))
  return np.asarray(image.convert('RGB'), dtype=np.uint8)


def _reason(error: BaseException) -> str:
  """What is wrong with an image file, from what reading it raised."""
  if isinstance(error, UnidentifiedImageError):
    return 'not an image PIL can read'
  if isinstance(error, _NotDecoded):
    return str(error)
  if isinstance(error, OSError) and error.strerror:
    return f'cannot be read ({error.strerror})'
  return f'cannot be decoded ({errors.first_line(error)})'


def read_image(path: pathlib.Path, at_least: Sizes | None = None) -> np.ndarray:
  """An image file as uint8 RGB; a JPEG decoded no smaller than `at_least`."""
  try:
    with Image.open(path) as image:
      if at_least is not None:
        height, width = at_least((image.height, image.width))
        image.draft(None, (max(width, 1), max(height, 1)))
      return to_rgb(image)
  except _DECODE_ERRORS as e:
    raise DatasetError(f'Cannot read image {path}: {_reason(e)}; fix or '
                       'remove it.') from e


def _file_problem(path: pathlib.Path) -> str | None:
  try:
    # A file that starts and ends as a whole JPEG or PNG does is not decoded:
    # checking a folder costs little more than listing it.
    with open(path, 'rb') as f:
      head, size = f.read(8), f.seek(0, os.SEEK_END)
      f.seek(max(size - 8, 0))
      tail = f.read()
    if not any(
        head.startswith(start) and tail.endswith(end)
        for start, end in _WHOLE_FILES):
      with Image.open(path) as image:
        to_rgb(image)
  except _DECODE_ERRORS as e:
    return _reason(e)
  return None


@dataclasses.dataclass(frozen=True)
class FileSource:
  """Image files, decoded when read (`dataset.scalable`)."""
  paths: list[pathlib.Path]
  labels: np.ndarray

  def __len__(self):
    return len(self.paths)

  def read(self, index: int, at_least=None):
    return read_image(self.paths[index], at_least), int(self.labels[index])

  __getitem__ = read


@dataclasses.dataclass
class _Findings:
  """What checking a folder found besides its images."""
  data_dir: pathlib.Path
  problems: list[str] = dataclasses.field(default_factory=list)
  ignored: list[str] = dataclasses.field(default_factory=list)

  def _name(self, path: pathlib.Path, folder: bool) -> str:
    return path.relative_to(self.data_dir).as_posix() + ('/' * folder)

  def problem(self, path: pathlib.Path, what: str, folder: bool = False):
    self.problems.append(f'{self._name(path, folder)}: {what}')

  def ignore(self, path: pathlib.Path, folder: bool):
    self.ignored.append(self._name(path, folder))


def _entries(folder: pathlib.Path, findings: _Findings) -> list[os.DirEntry]:
  """The folder's entries, sorted by name, hidden ones left out."""
  try:
    with os.scandir(folder) as entries:
      return sorted((e for e in entries if not e.name.startswith('.')),
                    key=lambda e: e.name)
  except OSError as e:
    findings.problem(folder, f'cannot be listed ({e.strerror})', folder=True)
    return []


def _class_folders(folder: pathlib.Path) -> list[str]:
  # Findings thrown away: a problem listing them is named with the split.
  return [e.name for e in _entries(folder, _Findings(folder)) if e.is_dir()]


def _list_class(folder: pathlib.Path,
                findings: _Findings) -> list[pathlib.Path]:
  images = []
  for entry in _entries(folder, findings):
    path = pathlib.Path(entry.path)
    if files.is_image_file(path) and not entry.is_dir():
      images.append(path)
    else:
      findings.ignore(path, folder=entry.is_dir())
  if not images:
    findings.problem(folder, f'holds no {files.IMAGE_TYPES} image', folder=True)
  return images


def _list_split(split_dir: pathlib.Path, class_names: list[str],
                findings: _Findings) -> FileSource:
  """The images of `split_dir/<class>/`, labelled by `class_names`."""
  split = split_dir.name
  if not split_dir.is_dir():
    val = split_dir.parent / 'val'  # a validation folder is passed on its own
    also = (f'; {val}/ is read only as --config.validation_dir={val}'
            if split == 'test' and val.is_dir() else '')
    findings.problem(
        split_dir, f'missing (put the {split} images in '
        f'{split}/<class>/{also})', folder=True)
    return FileSource([], np.zeros(0, np.int32))
  paths, labels = [], []
  entries = _entries(split_dir, findings)
  for entry in entries:
    path = pathlib.Path(entry.path)
    if not entry.is_dir():
      if files.is_image_file(path):
        findings.problem(
            path, 'an image outside a class folder (move it '
            f'into {split}/<class>/)')
      else:
        findings.ignore(path, folder=False)
    elif entry.name in class_names:
      images = _list_class(path, findings)
      paths += images
      labels += [class_names.index(entry.name)] * len(images)
    elif class_names:  # else the training split's problem is named
      findings.problem(
          path, f'no train/{entry.name}/ (a test class must be one of the '
          f'training classes: {", ".join(class_names)})', folder=True)
  if not any(entry.is_dir() for entry in entries):
    findings.problem(
        split_dir, 'holds no class folder (put the images in '
        f'{split}/<class>/)', folder=True)
  return FileSource(paths, np.asarray(labels, np.int32))


def _count(n: int, one: str, many: str | None = None) -> str:
  return f'{n} {one if n == 1 else many or one + "s"}'


def open_image_folder(
    data_dir: pathlib.Path,
    cut: Callable[[Dataset], Dataset] = lambda dataset: dataset) -> Dataset:
  """The images of `data_dir/{train,test}/<class>/` that `cut` keeps."""
  if not (data_dir / 'train').is_dir() and not (data_dir / 'test').is_dir():
    raise DatasetError(
        f'No image folder found in {data_dir}: expected '
        f'{data_dir}/train/<class>/*.jpg and {data_dir}/test/<class>/*.jpg.')
  findings = _Findings(data_dir)
  # The training class folders, sorted: label i is the i-th.
  class_names = _class_folders(data_dir / 'train')
  if len(class_names) == 1:  # every prediction right, nothing learned
    findings.problem(
        data_dir / 'train', f'holds one class ({class_names[0]}/): a '
        'classifier needs two or more', folder=True)
  train = _list_split(data_dir / 'train', class_names, findings)
  test = _list_split(data_dir / 'test', class_names, findings)
  dataset = Dataset(train, test, len(class_names), ordered_by_class=True,
                    class_names=tuple(class_names))
  if not findings.problems:
    dataset = cut(dataset)
  read = (dataset.train, dataset.test, dataset.validation)
  _check(findings, [p for s in read
                    for p in _files(s, (train, test))], data_dir)
  return dataset


def _files(source, folders: tuple[FileSource, ...]) -> list[pathlib.Path]:
  """The files of `folders` that `source` (one of them, or a subset) reads."""
  if isinstance(source, SubsetSource):
    inner = _files(source.source, folders)
    return [inner[i] for i in source.indices] if inner else []
  return source.paths if any(source is f for f in folders) else []


def open_split(folder: pathlib.Path, dataset: Dataset,
               keep: Callable[[FileSource], np.ndarray]) -> FileSource:
  """The images of `folder/<class>/` (classes by name) `keep` picks, checked."""
  if not folder.is_dir():
    raise DatasetError(f'No folder {folder}: pass a folder holding one '
                       '<class>/ folder of images per class.')
  if len(class_names := _class_folders(folder)) != dataset.num_classes:
    raise DatasetError(
        f'{folder} holds {_count(len(class_names), "class folder")}, but the '
        f'dataset has {dataset.num_classes} classes: give it one per class, '
        'named so that they sort in the order of the labels.')
  if dataset.class_names and tuple(class_names) != dataset.class_names:
    raise DatasetError(
        f'{folder} holds the class folders {", ".join(class_names)}; the '
        f'dataset names its classes {", ".join(dataset.class_names)}: name '
        'the folders as the dataset does.')
  findings = _Findings(folder.parent)
  split = _list_split(folder, class_names, findings)
  if not findings.problems:
    kept = keep(split)
    split = FileSource([split.paths[i] for i in kept], split.labels[kept])
  _check(findings, split.paths, folder)
  return split


def _check(findings: _Findings, paths: list[pathlib.Path],
           folder: pathlib.Path) -> None:
  """Every image readable, else one DatasetError; what was ignored, logged."""
  for path in paths:
    if problem := _file_problem(path):
      findings.problem(path, problem)
  if findings.problems:
    raise DatasetError(
        f'{_count(len(findings.problems), "problem")} in the image folder '
        f'{folder} (fix each, or move the file out of the folder, then run '
        f'again): {files.listed(findings.problems)}.')
  if findings.ignored:
    logging.warning(
        'Ignored %s in %s (not %s images): %s.',
        _count(len(findings.ignored), 'file or folder', 'files and folders'),
        folder, files.IMAGE_TYPES, files.listed(findings.ignored))

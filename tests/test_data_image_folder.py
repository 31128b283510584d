"""Image folders: classes from the training folders, files listed once and
decoded when read."""

import numpy as np
import pytest

from tests.conftest import png
from vit_jax.data import image_folder
from vit_jax.errors import DatasetError


def _write_folders(root, shape, counts=(('train', 3), ('test', 2))):
  """PNG files under root/{train,test}/{cat,dog}/; returns, per split, the
  (image, label) written, in the order the folder is read."""
  rng = np.random.default_rng(0)
  written = {}
  for split, count in counts:
    for label, name in enumerate(['cat', 'dog']):
      (root / split / name).mkdir(parents=True)
      for i in range(count):
        image = rng.integers(0, 256, shape(i), dtype=np.uint8)
        (root / split / name / f'{i}.png').write_bytes(png(image))
        written.setdefault(split, []).append((image, label))
  return written


def test_image_folder_reads_every_image_labelled_by_its_class(tmp_path):
  written = _write_folders(tmp_path, lambda i: (8, 8, 3))
  dataset = image_folder.open_image_folder(tmp_path)
  assert dataset.num_classes == 2
  for split in ('train', 'test'):
    source = getattr(dataset, split)
    assert len(source) == len(written[split])
    for i, (image, label) in enumerate(written[split]):
      read, read_label = source[i]
      np.testing.assert_array_equal(read, image)
      assert read_label == label


def test_image_folder_is_listed_and_read_lazily_at_any_size(tmp_path):
  _write_folders(tmp_path, lambda i: (9 + i, 11, 3))
  dataset = image_folder.open_image_folder(tmp_path)
  assert isinstance(dataset.train, image_folder.FileSource)
  assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (6, 4,
                                                                          2)
  image, label = dataset.train[4]
  assert image.shape == (10, 11, 3) and image.dtype == np.uint8
  assert label == 1


def test_only_image_files_are_read_and_a_grayscale_one_comes_as_rgb(
    tmp_path):
  _write_folders(tmp_path, lambda i: (8, 8, 3), (('train', 1), ('test', 1)))
  (tmp_path / 'train' / 'cat' / 'notes.txt').write_text('not an image')
  (tmp_path / 'train' / 'dog' / '1.PNG').write_bytes(
      png(np.full((5, 6), 7, np.uint8)))
  dataset = image_folder.open_image_folder(tmp_path)
  assert len(dataset.train) == 3
  image, label = dataset.train[2]
  assert image.shape == (5, 6, 3) and label == 1
  np.testing.assert_array_equal(image, 7)


def test_a_wrong_layout_says_what_is_expected(tmp_path):
  with pytest.raises(DatasetError, match='No image folder found in'):
    image_folder.open_image_folder(tmp_path)
  _write_folders(tmp_path, lambda i: (8, 8, 3))
  (tmp_path / 'test' / 'bird').mkdir()
  (tmp_path / 'test' / 'bird' / '0.png').write_bytes(
      png(np.zeros((8, 8, 3), np.uint8)))
  with pytest.raises(DatasetError, match="class 'bird' is not among the "
                     r"training classes \['cat', 'dog'\]"):
    image_folder.open_image_folder(tmp_path)


def test_an_unreadable_image_names_the_file(tmp_path):
  broken = tmp_path / 'broken.png'
  broken.write_bytes(b'not a png')
  with pytest.raises(DatasetError, match='Cannot read image .*broken.png'):
    image_folder.read_image(broken)

"""Image folders: classes, lazy decoding as a viewer shows, one error."""

import io
import logging

import numpy as np
from PIL import Image
import pytest

from tests import helpers
from vit_jax.data import image_folder
from vit_jax.errors import DatasetError


def test_image_folder_is_listed_and_read_lazily_at_any_size(tmp_path):
  written = helpers.write_image_folder(
      tmp_path, {'train': 3, 'test': 2},
      draw=lambda rng, i, _: rng.integers(0, 256, (9 + i, 11, 3), np.uint8))
  dataset = image_folder.open_image_folder(tmp_path)
  assert isinstance(dataset.train, image_folder.FileSource)
  assert dataset.num_classes == 2 and dataset.ordered_by_class
  assert dataset.class_names == ('cat', 'dog')
  for split in ('train', 'test'):
    source = getattr(dataset, split)
    assert len(source) == len(written[split])
    for i, (image, label) in enumerate(written[split]):
      read, read_label = source[i]
      assert read.dtype == np.uint8 and read_label == label
      np.testing.assert_array_equal(read, image)
  # A file broken after the listing is named when it is read.
  dataset.train.paths[0].write_bytes(b'not a png')
  with pytest.raises(
      DatasetError, match='Cannot read image .*0.png: '
      'not an image PIL can read; fix or remove it.'):
    dataset.train[0]  # pylint: disable=pointless-statement


def _encoded(image, image_format='PNG', **options) -> bytes:
  buffer = io.BytesIO()
  image.save(buffer, format=image_format, **options)
  return buffer.getvalue()


def _read_back(data: bytes) -> np.ndarray:
  """The encoded image `data`, as a folder's images are read."""
  image = image_folder.read_image(io.BytesIO(data))
  assert image.dtype == np.uint8 and image.shape[-1] == 3
  return image


@pytest.mark.parametrize('transparent, black', [(False, 0), (True, 255)])
def test_a_16_bit_png_is_scaled_and_its_transparent_value_shows_on_white(
    transparent, black):
  grey = Image.fromarray(np.array([[0, 32768, 65535]], np.uint16))  # I;16
  # PNG's tRNS chunk for a grey image
  encoded = _encoded(grey, **({'transparency': 0} if transparent else {}))
  np.testing.assert_array_equal(
      _read_back(encoded)[0], [[black] * 3, [128] * 3, [255] * 3])


@pytest.mark.parametrize('mode, dtype, values, expected', [
    ('I;16B', '>u2', [0, 32768, 65535], [0, 128, 255]),
    ('I;16L', '<u2', [0, 32768, 65535], [0, 128, 255]),
    ('I', '<i4', [-5, 32768, 65535, 99999], [0, 128, 255, 255]),
    ('F', '<f4', [-0.5, 0.5, 1.0, 2.0], [0, 128, 255, 255])
])
def test_deep_greyscale_modes_scale_to_8_bits(mode, dtype, values, expected):
  image = Image.frombytes(mode, (len(values), 1),
                          np.array(values, dtype).tobytes())
  rgb = image_folder.to_rgb(image)
  np.testing.assert_array_equal(rgb[0], np.repeat(expected, 3).reshape(-1, 3))


def test_transparent_pixels_show_on_white_and_cmyk_and_1_bit_as_colours():
  equal = np.testing.assert_array_equal
  rgba = np.array([[[200, 0, 0, 0], [0, 0, 0, 128], [10, 20, 30, 255]]],
                  np.uint8)
  equal(
      _read_back(_encoded(Image.fromarray(rgba, 'RGBA')))[0],
      [[255, 255, 255], [127, 127, 127], [10, 20, 30]])
  grey_alpha = Image.fromarray(np.array([[[0, 0], [0, 255]]], np.uint8), 'LA')
  equal(image_folder.to_rgb(grey_alpha)[0], [[255] * 3, [0] * 3])
  palette_alpha = Image.new('PA', (2, 1))
  palette_alpha.putpalette([0, 0, 200] * 256)
  palette_alpha.putpixel((1, 0), (0, 255))
  equal(image_folder.to_rgb(palette_alpha)[0], [[255] * 3, [0, 0, 200]])
  palette = Image.fromarray(np.array([[0, 1, 1]], np.uint8), 'P')
  palette.putpalette([255, 0, 0, 0, 0, 255])
  equal(
      _read_back(_encoded(palette, transparency=0))[0],
      [[255] * 3, [0, 0, 255], [0, 0, 255]])
  # CMYK and 1-bit images, as their colours.
  read = _read_back(_encoded(Image.new('CMYK', (8, 8), (255, 0, 0, 0)), 'JPEG'))
  np.testing.assert_allclose(read[4, 4], [0, 255, 255], atol=2)
  bits = Image.fromarray(np.array([[False, True]]))  # mode '1'
  equal(_read_back(_encoded(bits))[0], [[0] * 3, [255] * 3])


def test_exif_orientation_is_not_applied_as_in_the_official_decoding():
  stored = np.zeros((8, 16, 3), np.uint8)
  stored[:, :8] = 255  # left half white
  image = Image.fromarray(stored)
  exif = image.getexif()
  exif[0x0112] = 6  # a viewer rotates it 90 degrees clockwise
  read = _read_back(_encoded(image, 'JPEG', exif=exif, quality=95))
  assert read.shape == (8, 16, 3)
  np.testing.assert_allclose(read, stored, atol=8)


def test_every_problem_of_a_folder_is_named_in_one_error(tmp_path):
  with pytest.raises(DatasetError, match='No image folder found in'):
    image_folder.open_image_folder(tmp_path)
  helpers.write_image_folder(tmp_path, {'train': 3, 'test': 2})
  jpeg = _encoded(Image.fromarray(np.zeros((16, 16, 3), np.uint8)), 'JPEG')
  png = helpers.png(np.zeros((16, 16, 3), np.uint8))
  bad = [('train/cat/notes.jpg', b'not an image', 'not an image PIL can read'),
         ('train/cat/empty.png', b'', 'not an image PIL can read'),
         ('train/cat/cut.jpg', jpeg[:len(jpeg) // 2], 'cannot be decoded'),
         ('train/cat/cut.png', png[:-30], 'cannot be decoded'),
         ('train/cat/lab.png', _encoded(Image.new('LAB', (4, 4)), 'TIFF'),
          'its mode LAB is not one this reader decodes (save it as RGB)')]
  for name, data, _ in bad:
    (tmp_path / name).write_bytes(data)
  (tmp_path / 'train' / 'loose.png').write_bytes(png)
  (tmp_path / 'train' / 'empty').mkdir()
  (tmp_path / 'test' / 'bird').mkdir()
  with pytest.raises(DatasetError) as raised:
    image_folder.open_image_folder(tmp_path)
  message = str(raised.value)
  assert '\n' not in message
  assert message.startswith(f'8 problems in the image folder {tmp_path} (fix '
                            'each, or move the file out of the folder, then '
                            'run again): ')
  for name, _, what in bad:
    assert f'{name}: {what}' in message
  assert ('train/loose.png: an image outside a class folder (move it into '
          'train/<class>/)') in message
  assert 'train/empty/: holds no .jpg, .jpeg or .png image' in message
  assert ('test/bird/: no train/bird/ (a test class must be one of the '
          'training classes: cat, dog, empty)') in message
  assert 'train/cat/0.png' not in message


def test_a_missing_split_and_a_long_list_of_problems_twenty_named(tmp_path):
  helpers.write_image_folder(tmp_path, {'train': 1, 'val': 1})
  for i in range(25):
    (tmp_path / 'train' / 'dog' / f'bad{i:02}.jpg').write_bytes(b'')
  message = str(
      pytest.raises(DatasetError, image_folder.open_image_folder,
                    tmp_path).value)
  assert message.startswith('26 problems')
  assert (f'test/: missing (put the test images in test/<class>/; '
          f'{tmp_path}/val/ is read only as --config.validation_dir='
          f'{tmp_path}/val)') in message
  assert 'train/dog/bad00.jpg: not an image PIL can read' in message
  assert 'bad18.jpg' in message and 'bad19.jpg' not in message
  assert message.endswith('; ... and 6 more.')


def test_only_image_files_are_read_whole_or_with_trailing_bytes(
    tmp_path, caplog):
  helpers.write_image_folder(tmp_path, {'train': 1, 'test': 1})
  jpeg = _encoded(Image.fromarray(np.full((8, 8, 3), 50, np.uint8)), 'JPEG')
  (tmp_path / 'train' / 'cat' / 'trailer.jpg').write_bytes(jpeg + b'extra')
  (tmp_path / 'train' / 'cat' / 'notes.txt').write_text('not an image')
  (tmp_path / 'train' / 'cat' / '.DS_Store').write_bytes(b'')
  (tmp_path / 'train' / '.ipynb_checkpoints').mkdir()
  (tmp_path / 'train' / 'dog' / '1.PNG').write_bytes(
      helpers.png(np.full((5, 6), 7, np.uint8)))  # grayscale comes as RGB
  with caplog.at_level(logging.WARNING):
    dataset = image_folder.open_image_folder(tmp_path)
  assert len(dataset.train) == 4
  np.testing.assert_allclose(dataset.train[1][0], 50, atol=2)
  image, label = dataset.train[3]
  assert image.shape == (5, 6, 3) and label == 1
  np.testing.assert_array_equal(image, 7)
  assert 'Ignored 1 file or folder in' in caplog.text
  assert 'train/cat/notes.txt' in caplog.text and 'DS_Store' not in caplog.text


def test_a_folder_of_one_class_is_refused(tmp_path):
  helpers.write_image_folder(tmp_path, dict(train=2, test=1), classes=('cat',))
  with pytest.raises(
      DatasetError, match=r'train/: holds one class \(cat/\): '
      'a classifier needs two or more'):
    image_folder.open_image_folder(tmp_path)

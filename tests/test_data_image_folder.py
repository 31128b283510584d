"""Image folders: classes, lazy decoding as a viewer shows, one error."""

import io
import logging

import numpy as np
from PIL import Image
import pytest

from tests.helpers import png
from tests.helpers import start_main
from tests.helpers import write_process_config
from vit_jax.data import image_folder
from vit_jax.errors import DatasetError

ONE_EACH = (('train', 1), ('test', 1))


def _write_folders(root, shape=lambda i: (8, 8, 3),
                   counts=(('train', 3), ('test', 2))):
  """PNGs under root/{train,test}/{cat,dog}/; per split, (image, label)s."""
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
  written = _write_folders(tmp_path)
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


def test_only_image_files_are_read_and_a_grayscale_one_comes_as_rgb(tmp_path):
  _write_folders(tmp_path, counts=ONE_EACH)
  (tmp_path / 'train' / 'cat' / 'notes.txt').write_text('not an image')
  (tmp_path / 'train' / 'dog' / '1.PNG').write_bytes(
      png(np.full((5, 6), 7, np.uint8)))
  dataset = image_folder.open_image_folder(tmp_path)
  assert len(dataset.train) == 3
  image, label = dataset.train[2]
  assert image.shape == (5, 6, 3) and label == 1
  np.testing.assert_array_equal(image, 7)


def _encoded(image, image_format='PNG', **options) -> bytes:
  buffer = io.BytesIO()
  image.save(buffer, format=image_format, **options)
  return buffer.getvalue()


def _read_in_a_folder(tmp_path, name: str, data: bytes) -> np.ndarray:
  """The image `data`, saved as train/cat/`name`, as a folder reads it."""
  _write_folders(tmp_path, counts=ONE_EACH)
  (tmp_path / 'train' / 'cat' / name).write_bytes(data)
  train = image_folder.open_image_folder(tmp_path).train
  image, _ = train[train.paths.index(tmp_path / 'train' / 'cat' / name)]
  assert image.dtype == np.uint8 and image.shape[-1] == 3
  return image


@pytest.mark.parametrize('transparent, black', [(False, 0), (True, 255)])
def test_a_16_bit_png_is_scaled_and_its_transparent_value_shows_on_white(
    tmp_path, transparent, black):
  grey = Image.fromarray(np.array([[0, 32768, 65535]], np.uint16))
  assert grey.mode == 'I;16'
  # PNG's tRNS chunk for a grey image
  encoded = _encoded(grey, **({'transparency': 0} if transparent else {}))
  assert Image.open(io.BytesIO(encoded)).info.get('transparency') == (
      0 if transparent else None)
  np.testing.assert_array_equal(
      _read_in_a_folder(tmp_path, 'grey16.png', encoded)[0],
      [[black] * 3, [128] * 3, [255] * 3])


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


def test_transparent_pixels_show_on_white(tmp_path):
  rgba = np.array([[[200, 0, 0, 0], [0, 0, 0, 128], [10, 20, 30, 255]]],
                  np.uint8)
  np.testing.assert_array_equal(
      _read_in_a_folder(tmp_path, 'rgba.png',
                        _encoded(Image.fromarray(rgba, 'RGBA')))[0],
      [[255, 255, 255], [127, 127, 127], [10, 20, 30]])
  grey_alpha = Image.fromarray(np.array([[[0, 0], [0, 255]]], np.uint8), 'LA')
  np.testing.assert_array_equal(
      image_folder.to_rgb(grey_alpha)[0], [[255] * 3, [0] * 3])
  palette_alpha = Image.new('PA', (2, 1))
  palette_alpha.putpalette([0, 0, 200] * 256)
  palette_alpha.putpixel((1, 0), (0, 255))
  np.testing.assert_array_equal(
      image_folder.to_rgb(palette_alpha)[0], [[255] * 3, [0, 0, 200]])


def test_a_palette_png_with_a_transparent_entry_shows_it_on_white(tmp_path):
  image = Image.fromarray(np.array([[0, 1, 1]], np.uint8), 'P')
  image.putpalette([255, 0, 0, 0, 0, 255])
  read = _read_in_a_folder(tmp_path, 'palette.png',
                           _encoded(image, transparency=0))
  np.testing.assert_array_equal(read[0], [[255] * 3, [0, 0, 255], [0, 0, 255]])


def test_cmyk_jpeg_and_1_bit_png_read_as_their_colours(tmp_path):
  cyan = Image.new('CMYK', (8, 8), (255, 0, 0, 0))
  read = _read_in_a_folder(tmp_path, 'cmyk.jpg', _encoded(cyan, 'JPEG'))
  np.testing.assert_allclose(read[4, 4], [0, 255, 255], atol=2)
  bits = Image.fromarray(np.array([[False, True]]))
  assert bits.mode == '1'
  np.testing.assert_array_equal(
      image_folder.to_rgb(Image.open(io.BytesIO(_encoded(bits))))[0],
      [[0] * 3, [255] * 3])


def test_exif_orientation_is_not_applied_as_in_the_official_decoding(tmp_path):
  stored = np.zeros((8, 16, 3), np.uint8)
  stored[:, :8] = 255  # left half white
  image = Image.fromarray(stored)
  exif = image.getexif()
  exif[0x0112] = 6  # a viewer rotates it 90 degrees clockwise
  read = _read_in_a_folder(tmp_path, 'rotated.jpg',
                           _encoded(image, 'JPEG', exif=exif, quality=95))
  assert read.shape == (8, 16, 3)
  np.testing.assert_allclose(read, stored, atol=8)


def test_a_mode_it_does_not_decode_is_named(tmp_path):
  _write_folders(tmp_path, counts=ONE_EACH)
  (tmp_path / 'train' / 'cat' / 'lab.png').write_bytes(
      _encoded(Image.new('LAB', (4, 4)), 'TIFF'))
  with pytest.raises(
      DatasetError, match=r'train/cat/lab.png: its mode LAB '
      r'is not one this reader decodes \(save it as RGB\)'):
    image_folder.open_image_folder(tmp_path)


def test_a_wrong_layout_says_what_is_expected(tmp_path):
  with pytest.raises(DatasetError, match='No image folder found in'):
    image_folder.open_image_folder(tmp_path)
  _write_folders(tmp_path)
  (tmp_path / 'test' / 'bird').mkdir()
  (tmp_path / 'test' / 'bird' / '0.png').write_bytes(
      png(np.zeros((8, 8, 3), np.uint8)))
  with pytest.raises(
      DatasetError, match=r'test/bird/: no train/bird/ \(a '
      'test class must be one of the training classes: cat, '
      r'dog\)'):
    image_folder.open_image_folder(tmp_path)


def _bad_files(root) -> dict[str, str]:
  """Writes unreadable files; returns what the error says of each."""
  jpeg = _encoded(Image.fromarray(np.zeros((16, 16, 3), np.uint8)), 'JPEG')
  written = {
      'train/cat/notes.jpg': (b'not an image', 'not an image PIL can read'),
      'train/cat/empty.png': (b'', 'not an image PIL can read'),
      'train/cat/cut.jpg':
          (jpeg[:len(jpeg) // 2], 'cannot be decoded'), 'train/cat/cut.png':
              (png(np.zeros((16, 16, 3), np.uint8))[:-30], 'cannot be decoded'),
  }
  for name, (data, _) in written.items():
    (root / name).write_bytes(data)
  return {name: what for name, (_, what) in written.items()}


def test_every_problem_of_a_folder_is_named_in_one_error(tmp_path):
  _write_folders(tmp_path)
  bad = _bad_files(tmp_path)
  (tmp_path / 'train' / 'loose.png').write_bytes(
      png(np.zeros((4, 4, 3), np.uint8)))
  (tmp_path / 'train' / 'empty').mkdir()
  (tmp_path / 'test' / 'bird').mkdir()
  with pytest.raises(DatasetError) as raised:
    image_folder.open_image_folder(tmp_path)
  message = str(raised.value)
  assert '\n' not in message
  assert message.startswith(f'7 problems in the image folder {tmp_path} (fix '
                            'each, or move the file out of the folder, then '
                            'run again): ')
  for name, what in bad.items():
    assert f'{name}: {what}' in message
  assert ('train/loose.png: an image outside a class folder (move it into '
          'train/<class>/)') in message
  assert 'train/empty/: holds no .jpg, .jpeg or .png image' in message
  assert 'test/bird/: no train/bird/' in message
  assert 'train/cat/0.png' not in message


def test_a_long_list_of_problems_names_twenty_and_counts_the_rest(tmp_path):
  _write_folders(tmp_path)
  for i in range(25):
    (tmp_path / 'train' / 'dog' / f'bad{i:02}.jpg').write_bytes(b'')
  message = str(
      pytest.raises(DatasetError, image_folder.open_image_folder,
                    tmp_path).value)
  assert message.startswith('25 problems')
  assert 'bad19.jpg' in message and 'bad20.jpg' not in message
  assert message.endswith('; ... and 5 more.')


def test_a_missing_split_is_named_beside_the_other_problems(tmp_path):
  _write_folders(tmp_path, counts=(('train', 1),))
  (tmp_path / 'train' / 'dog' / 'bad.png').write_bytes(b'')
  message = str(
      pytest.raises(DatasetError, image_folder.open_image_folder,
                    tmp_path).value)
  assert message.startswith('2 problems')
  assert 'test/: missing (put the test images in test/<class>/)' in message
  assert 'train/dog/bad.png: not an image PIL can read' in message


def test_whole_files_with_trailing_bytes_and_other_files_are_fine(
    tmp_path, caplog):
  _write_folders(tmp_path, counts=ONE_EACH)
  jpeg = _encoded(Image.fromarray(np.full((8, 8, 3), 50, np.uint8)), 'JPEG')
  (tmp_path / 'train' / 'cat' / 'trailer.jpg').write_bytes(jpeg + b'extra')
  (tmp_path / 'train' / 'cat' / 'notes.txt').write_text('not an image')
  (tmp_path / 'train' / 'cat' / '.DS_Store').write_bytes(b'')
  (tmp_path / 'train' / '.ipynb_checkpoints').mkdir()
  with caplog.at_level(logging.WARNING):
    dataset = image_folder.open_image_folder(tmp_path)
  assert dataset.num_classes == 2 and len(dataset.train) == 3
  assert dataset.ordered_by_class
  np.testing.assert_allclose(dataset.train[1][0], 50, atol=2)
  assert 'Ignored 1 file or folder in' in caplog.text
  assert 'train/cat/notes.txt' in caplog.text
  assert 'DS_Store' not in caplog.text


def test_an_unreadable_image_names_the_file(tmp_path):
  broken = tmp_path / 'broken.png'
  broken.write_bytes(b'not a png')
  with pytest.raises(
      DatasetError, match='Cannot read image .*broken.png: '
      'not an image PIL can read; fix or remove it.'):
    image_folder.read_image(broken)


def test_main_names_every_bad_file_in_one_error_line(tmp_path):
  data_dir = tmp_path / 'photos'
  _write_folders(data_dir)
  bad = _bad_files(data_dir)
  log = tmp_path / 'main.log'
  process = start_main(write_process_config(tmp_path, data_dir),
                       tmp_path / 'run', log, '--config.dataset=image_folder')
  assert process.wait(timeout=300) == 1
  output = log.read_text()
  errors = [line for line in output.splitlines() if line.startswith('error:')]
  assert len(errors) == 1, output[-3000:]
  assert all(name in errors[0] for name in bad), errors[0]
  assert 'Traceback' not in output
  assert not (tmp_path / 'run').exists()

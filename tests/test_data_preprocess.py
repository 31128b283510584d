"""Crops, flips, resizing and normalization, on the host and the device."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from vit_jax.data import dataset
from vit_jax.data import image_folder
from vit_jax.data import preprocess


def test_inception_crop_box_stays_inside_the_official_ranges_or_is_whole():
  rng, areas = np.random.default_rng(0), []
  for _ in range(2000):
    top, left, height, width = preprocess.inception_crop_box(40, 60, rng)
    assert 0 <= top and top + height <= 40 and 0 <= left and left + width <= 60
    areas.append(height * width / (40 * 60))
    assert 0.04 <= areas[-1] <= 1.0 and 0.7 <= width / height <= 1.4
  # The height drawn uniformly, as TensorFlow draws it: a mean area of 0.31
  # here (the area drawn uniformly: 0.38).
  assert 0.29 < np.mean(areas) < 0.34
  # No crop of 5-100% of a 1x200 strip has an aspect ratio near 1: the whole.
  assert preprocess.inception_crop_box(1, 200, rng) == (0, 0, 1, 200)


def test_a_train_example_is_a_resized_crop_reproducible_from_its_seed():
  image = np.random.default_rng(0).integers(0, 256, (1, 50, 70, 3), np.uint8)
  source = dataset.ArraySource(image, np.array([5], np.int32))
  out = [
      preprocess.train_example(source, 0, 16, True,
                               np.random.default_rng([1, 2])) for _ in range(2)
  ]
  assert out[0][0].shape == (16, 16, 3) and out[0][0].dtype == np.uint8
  assert out[0][1] == 5
  np.testing.assert_array_equal(out[0][0], out[1][0])
  whole, _ = preprocess.train_example(source, 0, 70, False, None)
  np.testing.assert_array_equal(whole, preprocess.resize(image[0], 70))


def _jpeg_folder(tmp_path, count=4, size=(500, 375)):
  """JPEG files of `size` (width, height): smooth, lightly noisy images."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  paths = []
  for i in range(count):
    coarse = rng.integers(0, 256, (size[1] // 64, size[0] // 64, 3), np.uint8)
    image = np.asarray(Image.fromarray(coarse).resize(size, Image.BICUBIC))
    noisy = (image + rng.integers(-8, 9, image.shape)).clip(0, 255)
    paths.append(tmp_path / f'{i}.jpg')
    Image.fromarray(noisy.astype(np.uint8)).save(paths[-1], quality=90)
  return image_folder.FileSource(paths, np.arange(count) % 3)


@dataclasses.dataclass(frozen=True)
class _Decoded(image_folder.FileSource):
  """Image files that record the size each was decoded at."""
  sizes: list = dataclasses.field(default_factory=list)

  def read(self, index, at_least):
    image, label = super().read(index, at_least)
    self.sizes.append(image.shape[:2])
    return image, label


@pytest.mark.parametrize('size', [32, 224])
def test_a_jpeg_is_decoded_at_the_smallest_scale_its_crop_allows(
    tmp_path, size):
  """The same crops and flips as decoding whole, the pixels close."""
  files = _jpeg_folder(tmp_path)
  whole = dataset.ArraySource(np.stack([files[i][0]
                                        for i in range(4)]), files.labels)
  recorded = _Decoded(files.paths, files.labels)
  differences = []
  for seed in range(24):
    rng = lambda: np.random.default_rng(seed)  # pylint: disable=cell-var-from-loop
    box = preprocess.inception_crop_box(375, 500, rng())
    scaled, label = preprocess.train_example(recorded, seed % 4, size, True,
                                             rng())
    full, full_label = preprocess.train_example(whole, seed % 4, size, True,
                                                rng())
    assert scaled.shape == full.shape == (size, size, 3)
    assert label == full_label == seed % 4 % 3
    differences.append(np.abs(scaled.astype(int) - full).mean())
    factor, = (f for f in (1, 2, 4, 8)
               if recorded.sizes[-1] == (-(-375 // f), -(-500 // f)))
    # Reduced, the crop is still the output's size.
    assert factor == 1 or min(box[2], box[3]) / factor >= size
  if size == 224:  # 500x375 leaves no crop of 448 pixels each way...
    assert max(differences) == 0  # ...so every image was decoded whole
  else:
    assert min(r[0] for r in recorded.sizes) < 375  # some decoded smaller
    # Of 255: the scaled decode filters otherwise than the resize.
    assert np.mean(differences) < 6
  subset = dataset.SubsetSource(files, np.array([2, 0]))  # a subset too
  assert dataset.scalable(subset)
  for source, index in ((files, 0), (subset, 1)):
    rng = np.random.default_rng(7)
    np.testing.assert_array_equal(
        preprocess.train_example(source, index, 32, True, rng)[0],
        preprocess.train_example(files, 0, 32, True,
                                 np.random.default_rng(7))[0])


def test_random_crop_and_flip_is_a_shifted_crop_of_the_padded_image():
  images = jax.random.uniform(jax.random.key(0), (16, 6, 6, 3))
  out = np.asarray(preprocess.random_crop_and_flip(jax.random.key(1), images,
                                                   2))
  padded = np.pad(np.asarray(images), ((0, 0), (2, 2), (2, 2), (0, 0)))
  seen = set()
  for image, source in zip(out, padded):
    matches = [(dy, dx, flip) for dy in range(5) for dx in range(5)
               for flip in (False, True)
               if np.array_equal(image, (
                   lambda c: c[:, ::-1] if flip else c)(source[dy:dy + 6,
                                                               dx:dx + 6]))]
    assert matches
    seen.update(m[2] for m in matches)
  assert seen == {False, True}


def test_eval_input_scales_resizes_and_normalizes_as_train_input_unaugmented():
  images = jnp.full((2, 4, 4, 3), 255, jnp.uint8)
  out = preprocess.eval_input(images, image_size=8, mean=(0.5, 0.5, 0.5),
                              std=(0.25, 0.5, 1.0))
  assert out.shape == (2, 8, 8, 3)
  np.testing.assert_allclose(out[0, 0, 0], [2.0, 1.0, 0.5], rtol=1e-6)
  images = np.random.default_rng(0).integers(0, 256, (4, 6, 6, 3), np.uint8)
  stats = dict(image_size=8, mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4))
  np.testing.assert_array_equal(
      preprocess.train_input(images, jax.random.key(0), crop_and_flip=False,
                             policy=None, **stats),
      preprocess.eval_input(images, **stats))


def test_the_policy_changes_images_and_leaves_the_crops_as_they_were():
  assert preprocess.device_policy(helpers.schema_config()) is None
  for fields in (dict(auto_augment='trivial_augment'),
                 dict(auto_augment='rand_augment'), dict(random_erasing=0.5)):
    assert callable(preprocess.device_policy(helpers.schema_config(**fields)))
  # With erasing at probability 1, every image differs from the crop alone
  # only inside its erased rectangle: the crops themselves are the same.
  images = np.random.default_rng(0).integers(0, 256, (8, 32, 32, 3), np.uint8)
  policy = preprocess.device_policy(
      helpers.schema_config(random_erasing=1.0, pixel_mean=(0.5,) * 3,
                            pixel_std=(0.5,) * 3))
  kwargs = dict(key=jax.random.key(3), crop_and_flip=True, image_size=32,
                mean=(0.5,) * 3, std=(0.5,) * 3)
  plain, erased = (np.asarray(
      jax.jit(functools.partial(preprocess.train_input, policy=p,
                                **kwargs))(images)) for p in (None, policy))
  # (XLA may fuse the normalization differently: a 1e-9 difference is not
  # a change.)
  changed = np.any(np.abs(plain - erased) > 1e-5, axis=-1)
  for image_changed in changed:
    rows, cols = np.nonzero(image_changed)
    assert rows.size  # every image erased
    box = image_changed[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    assert box.all()  # one rectangle, the rest as cropped
  # The erased pixels hold DeiT's noise: N(0, 1) once normalized.
  values = erased[changed]
  assert values.size > 1000
  assert abs(values.mean()) < 0.1 and abs(values.std() - 1) < 0.1

"""Image preprocessing and augmentation, on the host and on the devices."""

from collections.abc import Callable
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.data import auto_augment
from vit_jax.data import dataset
from vit_jax.data import random_erasing

# tf.image.sample_distorted_bounding_box as the official code calls it: its
# default aspect ratios (width / height) and attempts.
_INCEPTION_AREA = (0.05, 1.0)
_INCEPTION_ASPECT = (0.75, 1.33)
_CROP_ATTEMPTS = 100


def resize(image: np.ndarray, size: int) -> np.ndarray:
  """A uint8 HxWx3 image resized to size x size as tf.image.resize does."""
  if image.shape[:2] == (size, size):
    return image
  from PIL import Image  # pylint: disable=g-import-not-at-top
  # Each pixel's centre sampled bilinearly, without antialiasing, as the
  # official code; PIL's resize would average the pixels a shrink drops.
  image = Image.fromarray(image)
  scale = (image.width / size, 0, 0, 0, image.height / size, 0)
  return np.asarray(
      image.transform((size, size), Image.AFFINE, scale, Image.BILINEAR))


def inception_crop_box(height: int, width: int,
                       rng: np.random.Generator) -> tuple[int, int, int, int]:
  """(top, left, height, width) of the official code's Inception crop."""
  for _ in range(_CROP_ATTEMPTS):
    if box := _crop_box(height, width, rng.uniform(*_INCEPTION_ASPECT), rng):
      return box
  return 0, 0, height, width


def _crop_box(height: int, width: int, aspect: float,
              rng: np.random.Generator) -> tuple[int, int, int, int] | None:
  """TensorFlow's draw of one crop: its height uniform between the areas'."""
  low, high = (a * height * width for a in _INCEPTION_AREA)
  shortest, tallest = (round(math.sqrt(a / aspect)) for a in (low, high))
  if round(tallest * aspect) > width:  # the tallest whose width still fits
    tallest = int((width + 0.5 - 1e-7) / aspect)
    if round(tallest * aspect) > width:
      tallest -= 1
  tallest = min(tallest, height)
  crop_height = int(rng.integers(min(shortest, tallest), tallest + 1))
  crop_width = round(crop_height * aspect)
  # A row more or less where rounding left the area outside the range.
  if crop_width * crop_height < low:
    crop_height += 1
    crop_width = round(crop_height * aspect)
  if crop_width * crop_height > high:
    crop_height -= 1
    crop_width = round(crop_height * aspect)
  if not (low <= crop_width * crop_height <= high and
          0 < crop_height <= height and 0 < crop_width <= width):
    return None
  top = int(rng.integers(0, max(height - crop_height, 1)))
  left = int(rng.integers(0, max(width - crop_width, 1)))
  return top, left, crop_height, crop_width


def train_example(source: dataset.Source, index: int, size: int, augment: bool,
                  rng: np.random.Generator) -> tuple[np.ndarray, int]:
  """`source[index]` for streaming: Inception crop + flip, resized."""
  crops = []  # (stored size, box)

  def at_least(stored):
    box = inception_crop_box(*stored, rng) if augment else (0, 0, *stored)
    crops.append((stored, box))
    return tuple(
        min(side, math.ceil(side * size / crop))
        for side, crop in zip(stored, box[2:]))

  if dataset.scalable(source):
    image, label = source.read(index, at_least)
  else:
    image, label = source[index]
    at_least(image.shape[:2])
  image = resize(_scaled_crop(image, *crops[0]), size)
  if augment and rng.random() < 0.5:
    image = image[:, ::-1]
  return image, label


def _scaled_crop(image: np.ndarray, stored: tuple[int, int],
                 box: tuple[int, int, int, int]) -> np.ndarray:
  """Crop `box` of an image `stored` large, from `image` decoded smaller."""
  scale_y, scale_x = (image.shape[0] / stored[0], image.shape[1] / stored[1])
  top, left, height, width = box
  y0, x0 = round(top * scale_y), round(left * scale_x)
  y1 = min(image.shape[0], max(y0 + 1, round((top + height) * scale_y)))
  x1 = min(image.shape[1], max(x0 + 1, round((left + width) * scale_x)))
  return image[y0:y1, x0:x1]


def random_crop_and_flip(key: jax.Array, images: jax.Array,
                         padding: int = 4) -> jax.Array:
  """torchvision's padded RandomCrop and RandomHorizontalFlip, per image."""
  n, h, w, _ = images.shape
  crop_key, flip_key = jax.random.split(key)
  offsets = jax.random.randint(crop_key, (n, 2), 0, 2 * padding + 1)
  flips = jax.random.bernoulli(flip_key, 0.5, (n,))
  padded = jnp.pad(images,
                   ((0, 0), (padding, padding), (padding, padding), (0, 0)))

  def crop(image, offset, flip):
    image = jax.lax.dynamic_slice(image, (offset[0], offset[1], 0),
                                  (h, w, image.shape[-1]))
    return jnp.where(flip, image[:, ::-1], image)

  return jax.vmap(crop)(padded, offsets, flips)


Policy = Callable[[jax.Array, jax.Array], jax.Array]


def device_policy(config) -> Policy | None:
  """The config's augmentations beyond the crop and flip, or None."""
  steps = []
  if config.auto_augment == 'trivial_augment':
    steps.append(auto_augment.trivial_augment)
  elif config.auto_augment == 'rand_augment':
    steps.append(
        functools.partial(auto_augment.rand_augment,
                          num_ops=config.rand_augment_ops,
                          magnitude=config.rand_augment_magnitude))
  if config.random_erasing:
    # DeiT's setting (timm's `remode='pixel'`): normal noise once normalized.
    steps.append(
        functools.partial(random_erasing.random_erasing,
                          probability=config.random_erasing, mode='pixel',
                          mean=tuple(config.pixel_mean),
                          std=tuple(config.pixel_std)))
  if not steps:
    return None

  def policy(key, images):
    for i, step in enumerate(steps):
      images = step(jax.random.fold_in(key, i), images)
    return images

  return policy


def train_input(images: jax.Array, key: jax.Array, *, crop_and_flip: bool,
                policy: Policy | None, image_size: int, mean, std) -> jax.Array:
  """uint8 NHWC images augmented, resized and normalized for training."""
  x = images.astype(jnp.float32) / 255.0
  if crop_and_flip:
    x = random_crop_and_flip(key, x)
  if policy is not None:
    # A key of its own, so the crops stay those of a run without `policy`.
    x = policy(jax.random.fold_in(key, 1), x)
  return eval_input(x, image_size=image_size, mean=mean, std=std)


def eval_input(images: jax.Array, *, image_size: int, mean, std) -> jax.Array:
  """uint8 (or [0, 1] float) NHWC images resized and normalized."""
  if images.dtype == jnp.uint8:
    images = images.astype(jnp.float32) / 255.0
  if images.shape[1:3] != (image_size, image_size):
    images = jax.image.resize(
        images, (images.shape[0], image_size, image_size, images.shape[3]),
        method='bilinear', antialias=False)  # as `resize`
  return (images - jnp.asarray(mean)) / jnp.asarray(std)

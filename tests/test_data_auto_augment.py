"""TrivialAugment and RandAugment: the ops against PIL, the draws."""

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageEnhance, ImageOps
import pytest

from vit_jax.data import auto_augment

SHAPE = (8, 32, 32, 3)
IMAGES = jax.random.uniform(jax.random.key(0), SHAPE)
WIDE = auto_augment.TRIVIAL_AUGMENT_WIDE
RAND = auto_augment.RAND_AUGMENT

# One compiled program per image shape and ranges: the op and magnitude are
# arguments.
_apply_op = jax.jit(auto_augment.apply_op, static_argnames='ranges')
_trivial_augment = jax.jit(auto_augment.trivial_augment)
_rand_augment = jax.jit(  # rand-m9-n2, its probability traced
    lambda key, images, probability: auto_augment.rand_augment(
        key, images, probability=probability))


def apply(images, name, magnitude, ranges=WIDE):
  n = images.shape[0]
  ops = jnp.full((n,), auto_augment.OPS.index(name), jnp.int32)
  magnitudes = jnp.broadcast_to(jnp.asarray(magnitude, jnp.float32), (n,))
  return np.asarray(
      _apply_op(jnp.asarray(images), ops, magnitudes, ranges=ranges))


def uint8_images(seed=0, shape=SHAPE):
  return np.random.default_rng(seed).integers(0, 256, shape, np.uint8)


def constant(value, shape=SHAPE):
  return np.full(shape, value / 255, np.float32)


def test_every_op_keeps_shape_dtype_and_range_and_magnitude_zero_is_none():
  magnitudes = jax.random.uniform(jax.random.key(1), (8,), minval=-1.0)
  for first in (0, 8):
    ops = (jnp.arange(8) + first) % len(auto_augment.OPS)
    for ranges in (WIDE, RAND):
      out = _apply_op(IMAGES, ops, magnitudes, ranges=ranges)
      assert out.shape == SHAPE and out.dtype == jnp.float32
      assert 0.0 <= float(out.min()) and float(out.max()) <= 1.0
  # The identity, and magnitude zero, leave images unchanged.
  images = uint8_images() / np.float32(255)
  np.testing.assert_array_equal(apply(images, 'identity', 1.0), images)
  np.testing.assert_array_equal(apply(images, 'identity', -1.0), images)
  for name in auto_augment.OPS:
    if name not in ('auto_contrast', 'equalize'):
      np.testing.assert_allclose(apply(images, name, 0.0), images, atol=1e-6,
                                 err_msg=name)


def test_geometric_ops_shift_rotate_and_shear_with_gray_fill():
  x = np.asarray(IMAGES)
  # Wide: 32 pixels at magnitude 1; 3 / 32 -> 3 pixels right.
  right = apply(x, 'translate_x', 3 / 32)
  np.testing.assert_array_equal(right[:, :, 3:], x[:, :, :-3])
  np.testing.assert_array_equal(right[:, :, :3], 0.5)
  left = apply(x, 'translate_x', -3 / 32)
  np.testing.assert_array_equal(left[:, :, :-3], x[:, :, 3:])
  # RandAugment: 45% of the height, round(14.4) = 14 pixels down.
  down = apply(x, 'translate_y', 1.0, RAND)
  np.testing.assert_array_equal(down[:, 14:], x[:, :-14])
  np.testing.assert_array_equal(down[:, :14], 0.5)
  # Rotate: a quarter turn counter-clockwise.
  for turns in (1, -1):
    np.testing.assert_allclose(apply(x, 'rotate', turns * 90 / 135),
                               np.rot90(x, turns, axes=(1, 2)), atol=1e-4)
  out = apply(x, 'shear_x', 0.4 / 0.99)  # shear factor 0.4
  # Row y samples x + 0.4 (y + 0.5), as torchvision's and PIL's shear: row 2
  # from x + 1, row 7 from x + 3; the pixels read from outside are gray.
  np.testing.assert_allclose(out[:, 2, :-1], x[:, 2, 1:], atol=1e-5)
  np.testing.assert_allclose(out[:, 2, -1], 0.5, atol=1e-5)
  np.testing.assert_allclose(out[:, 7, :-3], x[:, 7, 3:], atol=1e-5)
  np.testing.assert_allclose(out[:, 7, -3:], 0.5, atol=1e-5)
  # Negative magnitudes the other way; shear y the same with columns.
  out = apply(x, 'shear_x', -0.4 / 0.99)
  np.testing.assert_allclose(out[:, 7, 3:], x[:, 7, :-3], atol=1e-5)
  out = apply(x, 'shear_y', 0.4 / 0.99)
  np.testing.assert_allclose(out[:, :-3, 7], x[:, 3:, 7], atol=1e-5)


def test_solarize_posterize_brightness_on_constant_images():
  x = constant(100)  # 0b01100100
  # Solarize: values at or above 256 (1 - m) of 255 inverted.
  bright = constant(200)
  for magnitude in (0.5, -0.7, 0.22):  # thresholds 128, 76.8, 199.7
    np.testing.assert_allclose(apply(bright, 'solarize', magnitude), 55 / 255,
                               atol=1e-6)
  np.testing.assert_array_equal(apply(bright, 'solarize', 0.2), bright)
  # Posterize: wide keeps 8 -> 2 bits, RandAugment 8 -> 4.
  np.testing.assert_allclose(apply(x, 'posterize', 1.0), 64 / 255, atol=1e-6)
  np.testing.assert_allclose(apply(x, 'posterize', 0.5), 96 / 255, atol=1e-6)
  np.testing.assert_allclose(apply(x, 'posterize', 1.0, RAND), 96 / 255,
                             atol=1e-6)
  # Brightness: factor 1 + 0.99 m (wide), 1 + 0.9 m (RandAugment).
  np.testing.assert_allclose(apply(x, 'brightness', 0.5), 1.495 * 100 / 255,
                             rtol=1e-5)
  np.testing.assert_allclose(apply(x, 'brightness', -0.5, RAND),
                             0.55 * 100 / 255, rtol=1e-5)
  np.testing.assert_array_equal(apply(constant(200), 'brightness', 1.0), 1.0)


@pytest.mark.parametrize('name, magnitude, reference, atol', [
    ('auto_contrast', 0.0, ImageOps.autocontrast, 1.0),
    ('equalize', 0.0, ImageOps.equalize, 0.0),
    ('solarize', 0.5, lambda im: ImageOps.solarize(im, 128), 0.0),
    ('posterize', 0.5, lambda im: ImageOps.posterize(im, 5), 0.0),
    ('color', 0.5, lambda im: ImageEnhance.Color(im).enhance(1.495), 1.5),
    ('color', -0.5, lambda im: ImageEnhance.Color(im).enhance(0.505), 1.5),
    ('contrast', 0.5, lambda im: ImageEnhance.Contrast(im).enhance(1.495), 1.5),
    ('brightness', -0.5, lambda im: ImageEnhance.Brightness(im).enhance(0.505),
     1.0),
    ('sharpness', 0.5, lambda im: ImageEnhance.Sharpness(im).enhance(1.495),
     1.5),
])
def test_photometric_ops_match_pil(name, magnitude, reference, atol):
  # Low-contrast images, so that auto_contrast and equalize have work to do.
  images = (uint8_images() // 4 + 60).astype(np.uint8)
  out = apply(images / np.float32(255), name, magnitude) * 255
  expected = [np.asarray(reference(Image.fromarray(i))) for i in images]
  np.testing.assert_allclose(out, np.stack(expected), atol=atol + 1e-3)


def test_trivial_and_rand_augment_compile_are_seeded_and_vary():
  for fn in (_trivial_augment, lambda k, x: _rand_augment(k, x, 0.5)):
    out = fn(jax.random.key(1), IMAGES)
    assert out.shape == SHAPE and out.dtype == jnp.float32
    assert 0.0 <= float(out.min()) and float(out.max()) <= 1.0
    np.testing.assert_array_equal(out, fn(jax.random.key(1), IMAGES))
    assert not np.array_equal(out, fn(jax.random.key(2), IMAGES))
    # Per-image draws: images changed by different amounts.
    change = np.abs(np.asarray(out) - np.asarray(IMAGES)).mean(axis=(1, 2, 3))
    assert np.unique(change).size > 2
  # RandAugment with probability zero is the identity.
  np.testing.assert_array_equal(_rand_augment(jax.random.key(1), IMAGES, 0.0),
                                IMAGES)

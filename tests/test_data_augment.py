"""TrivialAugment, RandAugment, random erasing and mixup / CutMix, on the
device."""

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageEnhance, ImageOps
import pytest

from vit_jax.data import augment

SHAPE = (8, 32, 32, 3)
WIDE = augment.TRIVIAL_AUGMENT_WIDE
RAND = augment.RAND_AUGMENT

# One compiled program per image shape and ranges: the op and magnitude are
# arguments.
_apply_op = jax.jit(augment.apply_op, static_argnames='ranges')
_trivial_augment = jax.jit(augment.trivial_augment)
_rand_augment = jax.jit(  # rand-m9-n2, its probability traced
    lambda key, images, probability: augment.rand_augment(
        key, images, probability=probability))
_erase = jax.jit(augment.random_erasing, static_argnames='mode')


def apply(images, name, magnitude, ranges=WIDE):
  n = images.shape[0]
  ops = jnp.full((n,), augment.op_index(name), jnp.int32)
  magnitudes = jnp.broadcast_to(jnp.asarray(magnitude, jnp.float32), (n,))
  return np.asarray(_apply_op(jnp.asarray(images), ops, magnitudes,
                              ranges=ranges))


def uint8_images(seed=0, shape=SHAPE):
  return np.random.default_rng(seed).integers(0, 256, shape, np.uint8)


def constant(value, shape=SHAPE):
  return np.full(shape, value / 255, np.float32)


def test_every_op_keeps_shape_dtype_and_range():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  magnitudes = jax.random.uniform(jax.random.key(1), (8,), minval=-1.0)
  for first in (0, 8):
    ops = (jnp.arange(8) + first) % len(augment.OPS)
    for ranges in (WIDE, RAND):
      out = _apply_op(images, ops, magnitudes, ranges=ranges)
      assert out.shape == images.shape and out.dtype == jnp.float32
      assert 0.0 <= float(out.min()) and float(out.max()) <= 1.0


def test_identity_and_magnitude_zero_leave_images_unchanged():
  images = uint8_images() / np.float32(255)
  np.testing.assert_array_equal(apply(images, 'identity', 1.0), images)
  np.testing.assert_array_equal(apply(images, 'identity', -1.0), images)
  for name in augment.OPS:
    if name not in ('auto_contrast', 'equalize'):
      np.testing.assert_allclose(apply(images, name, 0.0), images, atol=1e-6,
                                 err_msg=name)


def test_translate_shifts_whole_pixels_with_gray_fill():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  x = np.asarray(images)
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


def test_rotate_a_quarter_turn_counter_clockwise():
  x = np.asarray(jax.random.uniform(jax.random.key(0), SHAPE))
  np.testing.assert_allclose(apply(x, 'rotate', 90 / 135),
                             np.rot90(x, 1, axes=(1, 2)), atol=1e-4)
  np.testing.assert_allclose(apply(x, 'rotate', -90 / 135),
                             np.rot90(x, -1, axes=(1, 2)), atol=1e-4)


def test_shears_slide_rows_and_columns_about_the_top_left_corner():
  x = np.asarray(jax.random.uniform(jax.random.key(0), SHAPE))
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
  value = 100  # 0b01100100
  x = constant(value)
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


def _pil(images, fn):
  return np.stack([np.asarray(fn(Image.fromarray(image))) for image in images])


@pytest.mark.parametrize('name, magnitude, reference, atol', [
    ('auto_contrast', 0.0, ImageOps.autocontrast, 1.0),
    ('equalize', 0.0, ImageOps.equalize, 0.0),
    ('solarize', 0.5, lambda im: ImageOps.solarize(im, 128), 0.0),
    ('posterize', 0.5, lambda im: ImageOps.posterize(im, 5), 0.0),
    ('color', 0.5, lambda im: ImageEnhance.Color(im).enhance(1.495), 1.5),
    ('color', -0.5, lambda im: ImageEnhance.Color(im).enhance(0.505), 1.5),
    ('contrast', 0.5, lambda im: ImageEnhance.Contrast(im).enhance(1.495),
     1.5),
    ('brightness', -0.5,
     lambda im: ImageEnhance.Brightness(im).enhance(0.505), 1.0),
    ('sharpness', 0.5, lambda im: ImageEnhance.Sharpness(im).enhance(1.495),
     1.5),
])
def test_photometric_ops_match_pil(name, magnitude, reference, atol):
  images = uint8_images()
  # Low-contrast images, so that auto_contrast and equalize have work to do.
  images = (images // 4 + 60).astype(np.uint8)
  out = apply(images / np.float32(255), name, magnitude) * 255
  np.testing.assert_allclose(out, _pil(images, reference), atol=atol + 1e-3)


def test_trivial_and_rand_augment_compile_are_seeded_and_vary():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  for fn in (_trivial_augment, lambda k, x: _rand_augment(k, x, 0.5)):
    out = fn(jax.random.key(1), images)
    assert out.shape == SHAPE and out.dtype == jnp.float32
    assert 0.0 <= float(out.min()) and float(out.max()) <= 1.0
    np.testing.assert_array_equal(out, fn(jax.random.key(1), images))
    assert not np.array_equal(out, fn(jax.random.key(2), images))
    # Per-image draws: images changed by different amounts.
    change = np.abs(np.asarray(out) - np.asarray(images)).mean(axis=(1, 2, 3))
    assert np.unique(change).size > 2


def test_rand_augment_with_probability_zero_is_the_identity():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  out = _rand_augment(jax.random.key(1), images, 0.0)
  np.testing.assert_array_equal(out, images)


def test_trivial_augment_rejects_a_single_bin():
  with pytest.raises(ValueError, match='num_magnitude_bins'):
    augment.trivial_augment(jax.random.key(0), jnp.zeros(SHAPE), 1)


# ------------------------------------------------------- random erasing ----


def test_random_erasing_with_probability_zero_is_the_identity():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  out = _erase(jax.random.key(1), images, 0.0)
  np.testing.assert_array_equal(out, images)


def test_random_erasing_fills_one_rectangle_of_the_area_range():
  images = 0.4 * jax.random.uniform(jax.random.key(0), SHAPE)
  out = np.concatenate([_erase(jax.random.key(seed), images, 1.0)
                        for seed in range(4)])
  np.testing.assert_array_equal(out[:8], _erase(jax.random.key(0), images,
                                                1.0))
  fractions, aspects = [], []
  for image in out:
    filled = np.all(image == 0.5, axis=-1)
    rows, cols = np.nonzero(filled)
    assert rows.size, 'no rectangle erased'
    box = filled[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    assert box.all() and box.sum() == filled.sum()  # one full rectangle
    fractions.append(box.size / filled.size)
    aspects.append(box.shape[0] / box.shape[1])
  # The area range (0.02, 1/3) and aspect range (0.3, 3.3), up to rounding
  # the sides to whole pixels.
  assert 0.01 <= min(fractions) and max(fractions) <= 0.38
  assert 0.2 <= min(aspects) and max(aspects) <= 4.5
  assert len(set(fractions)) > 5


def test_random_erasing_fills_what_timm_fills_once_normalised():
  mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
  images = jnp.full(SHAPE, 2.0)  # outside [0, 1]: never a fill value
  normalised = lambda x: (np.asarray(x) - np.asarray(mean)) / np.asarray(std)
  const = _erase(jax.random.key(3), images, 1.0, mean=mean, std=std)
  erased = np.asarray(const) != 2.0
  assert erased.any(axis=(1, 2, 3)).all()
  np.testing.assert_allclose(normalised(const)[erased], 0.0, atol=1e-6)
  # DeiT's 'pixel' mode: N(0, 1) per pixel and channel, once normalised.
  noise = _erase(jax.random.key(3), images, 1.0, mode='pixel', mean=mean,
                 std=std)
  values = normalised(noise)[np.asarray(noise) != 2.0]
  assert values.size > 1000
  assert abs(values.mean()) < 0.1 and abs(values.std() - 1) < 0.1


# ------------------------------------------------------- mixup / cutmix ----

LABELS = jnp.arange(8) % 10


@jax.jit
def _mix_and_parameters(key, images, mixup_alpha, cutmix_alpha,
                        switch_probability, label_smoothing, probability):
  # The alphas and probabilities are traced: one program for every setting.
  return (*augment.mix(key, images, LABELS, 10, mixup_alpha, cutmix_alpha,
                       switch_probability, label_smoothing, probability),
          augment.mix_parameters(key, images.shape, mixup_alpha, cutmix_alpha,
                                 switch_probability, probability))


def mix(key, images, mixup_alpha, cutmix_alpha, switch_probability=0.5,
        label_smoothing=0.0, probability=1.0):
  """`augment.mix`'s images and targets, and the parameters it used."""
  return _mix_and_parameters(key, images, mixup_alpha, cutmix_alpha,
                             switch_probability, label_smoothing, probability)


def test_mixup_blends_the_batch_with_its_reverse():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  for seed in range(3):
    out, targets, (lam, use_cutmix, box) = mix(jax.random.key(seed), images,
                                               0.8, 0.0)
    assert not use_cutmix and not box.any() and 0 < lam < 1
    np.testing.assert_allclose(out, lam * images + (1 - lam) * images[::-1],
                               atol=1e-6)
    one_hot = np.eye(10)[LABELS]
    np.testing.assert_allclose(targets,
                               lam * one_hot + (1 - lam) * one_hot[::-1],
                               atol=1e-6)
    assert targets.dtype == jnp.float32 and targets.shape == (8, 10)
    np.testing.assert_allclose(targets.sum(1), 1.0, atol=1e-6)


def test_cutmix_pastes_a_box_and_weighs_labels_by_its_area():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  areas = set()
  for seed in range(4):
    out, targets, (lam, use_cutmix, box) = mix(jax.random.key(seed), images,
                                               0.0, 1.0)
    box = np.asarray(box)
    assert use_cutmix
    pasted = box[None, :, :, None]
    np.testing.assert_array_equal(out, np.where(pasted, images[::-1], images))
    fraction = box.mean()
    areas.add(fraction)
    np.testing.assert_allclose(lam, 1 - fraction, rtol=1e-6)
    own = np.asarray(targets)[np.arange(8), LABELS]
    np.testing.assert_allclose(own, 1 - fraction, rtol=1e-6)
    np.testing.assert_allclose(targets.sum(1), 1.0, atol=1e-6)
  assert len(areas) > 1


def test_switch_probability_picks_cutmix_or_mixup():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  for switch, expected in ((1.0, True), (0.0, False)):
    params = mix(jax.random.key(0), images, 1.0, 1.0, switch)[2]
    assert bool(params.use_cutmix) == expected
  picks = [bool(mix(jax.random.key(s), images, 1.0, 1.0)[2].use_cutmix)
           for s in range(20)]
  assert set(picks) == {False, True}


def test_no_mixing_gives_the_images_and_one_hot_targets():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  out, targets = augment.mix(jax.random.key(1), images, LABELS, 10, 0.0, 0.0)
  assert out is images
  np.testing.assert_array_equal(targets, np.eye(10)[LABELS])
  out, targets, params = mix(jax.random.key(1), images, 1.0, 1.0,
                             probability=0.0)
  assert params.lam == 1 and not params.use_cutmix
  np.testing.assert_array_equal(out, images)
  np.testing.assert_array_equal(targets, np.eye(10)[LABELS])
  # Traced zeros take the compiled path: lam 1, the same result.
  out, targets, params = mix(jax.random.key(1), images, 0.0, 0.0)
  assert params.lam == 1 and not params.use_cutmix
  np.testing.assert_array_equal(out, images)
  np.testing.assert_array_equal(targets, np.eye(10)[LABELS])


def test_label_smoothing_follows_timm():
  images = jax.random.uniform(jax.random.key(0), SHAPE)
  _, targets = augment.mix(jax.random.key(1), images, LABELS, 10, 0.0, 0.0,
                           label_smoothing=0.1)
  np.testing.assert_allclose(targets, np.where(np.eye(10)[LABELS], 0.91, 0.01),
                             rtol=1e-6)
  _, targets, (lam, _, _) = mix(jax.random.key(2), images, 0.8, 0.0,
                                label_smoothing=0.1)
  smooth = np.where(np.eye(10)[LABELS], 0.91, 0.01)
  np.testing.assert_allclose(targets, lam * smooth + (1 - lam) * smooth[::-1],
                             atol=1e-6)
  np.testing.assert_allclose(targets.sum(1), 1.0, atol=1e-6)

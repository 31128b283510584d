"""Random erasing on the device, filled as timm fills it."""

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.data import random_erasing

SHAPE = (8, 32, 32, 3)
_erase = jax.jit(random_erasing.random_erasing)


def test_random_erasing_fills_one_rectangle_as_timm_fills_it():
  images = 0.4 * jax.random.uniform(jax.random.key(0), SHAPE)
  out = np.concatenate([
      _erase(jax.random.key(seed), images, 1.0) for seed in range(4)
  ])
  np.testing.assert_array_equal(out[:8], _erase(jax.random.key(0), images, 1.0))
  fractions, aspects = [], []
  for image in out:
    filled = np.all(image == 0.5, axis=-1)
    rows, cols = np.nonzero(filled)
    assert rows.size, 'no rectangle erased'
    box = filled[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    assert box.all() and box.sum() == filled.sum()  # one full rectangle
    fractions.append(box.size / filled.size)
    aspects.append(box.shape[0] / box.shape[1])
  # The area range (0.02, 1/3) and aspect range (0.3, 1/0.3), up to rounding
  # the sides to whole pixels.
  assert 0.01 <= min(fractions) and max(fractions) <= 0.38
  assert 0.2 <= min(aspects) and max(aspects) <= 4.5 and len(set(fractions)) > 5
  # With probability zero, the identity.
  np.testing.assert_array_equal(_erase(jax.random.key(1), images, 0.0), images)
  # The fill is timm's zeros once normalized (its noise: test_data_preprocess).
  mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
  images = jnp.full(SHAPE, 2.0)  # outside [0, 1]: never a fill value
  normalized = lambda x: (np.asarray(x) - np.asarray(mean)) / np.asarray(std)
  const = _erase(jax.random.key(3), images, 1.0, mean=mean, std=std)
  erased = np.asarray(const) != 2.0
  assert erased.any(axis=(1, 2, 3)).all()
  np.testing.assert_allclose(normalized(const)[erased], 0.0, atol=1e-6)

"""Patch embedding: shifted patch tokenization against a numpy reference."""

import numpy as np
import pytest

from tests import helpers
from vit_jax.models.layers.patch_embedding import shifted_patch_tokens


def _shifted(x, dy, dx):
  """x moved by (dy, dx) pixels, zeros shifted in: out[i, j] = x[i-dy, j-dx]."""
  h, w = x.shape[1:3]
  padded = np.pad(x, ((0, 0), (h, h), (w, w), (0, 0)))
  return padded[:, h - dy:2 * h - dy, w - dx:2 * w - dx]


@pytest.mark.parametrize('patch', [2, 3])
def test_shifted_patch_tokens_match_a_numpy_reference(patch):
  images = np.asarray(helpers.images(batch=1, size=2 * patch))
  s = patch // 2
  # The image, then its copies moved up-left, up-right, down-left, down-right.
  stacked = np.concatenate(
      [images] + [_shifted(images, dy, dx) for dy in (-s, s)
                  for dx in (-s, s)], axis=-1)
  expected = np.stack([
      np.stack([
          stacked[0, r * patch:(r + 1) * patch,
                  c * patch:(c + 1) * patch].ravel() for c in range(2)
      ]) for r in range(2)
  ])[None]
  np.testing.assert_array_equal(shifted_patch_tokens(images, patch), expected)


def test_shifted_patches_replace_the_embedding_conv():
  model = helpers.small_vit(7, shifted_patches=True)
  logits, shapes = helpers.init_shapes(model, helpers.images(batch=3))
  assert logits.shape == (3, 7)
  features = 4 * 4 * 3 * 5
  assert 'embedding/kernel' not in shapes
  assert {k: v for k, v in shapes.items() if k.startswith('shifted')} == {
      'shifted_patch_norm/scale': (features,), 'shifted_patch_norm/bias':
          (features,), 'shifted_patch_embedding/kernel': (features, 32),
      'shifted_patch_embedding/bias': (32,),
  }

"""Position embeddings: the learned table and the fixed 2-D sine-cosine one."""

import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models.layers.position import posemb_sincos_2d
from tests import helpers


def _permute_patches(images, patch, permutation):
  """Patch permutation[i] of the row-major grid goes to place i."""
  b, h, w, c = images.shape
  rows, cols = h // patch, w // patch
  x = images.reshape(b, rows, patch, cols, patch, c).transpose(0, 1, 3, 2, 4, 5)
  x = x.reshape(b, rows * cols, patch, patch, c)[:, permutation]
  x = x.reshape(b, rows, cols, patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, h, w, c)


@pytest.mark.parametrize('posemb,classifier', [('none', 'gap'), ('none', 'map'),
                                               ('learned', 'gap')])
def test_only_a_position_embedding_makes_patch_order_matter(posemb, classifier):
  # The property: without position information a pooling head sees a
  # set of patches, so permuting them changes nothing; the (random, nonzero)
  # learned embedding ties each patch to its place.
  model = helpers.small_vit(posemb=posemb, classifier=classifier)
  images = helpers.images()
  params = helpers.random_params(model, images, train=False)
  # Were the helper to move nothing, the learned case would fail; to change
  # pixels, the others would.
  permuted = _permute_patches(images, 4,
                              np.random.default_rng(0).permutation(16))
  logits, permuted_logits = (model.apply({'params': params}, x, train=False)
                             for x in (images, permuted))
  invariant = np.allclose(permuted_logits, logits, rtol=1e-5, atol=1e-5)
  assert invariant == (posemb == 'none')
  if posemb == 'none':
    assert 'posembed_input' not in params['Transformer']


def test_sincos2d_posemb_matches_a_numpy_reference():
  # 2x2 grid, width 8: two frequencies, 1 and 1 / 10000.
  y, x = np.divmod(np.arange(4), 2)  # the row-major grid
  angles = [np.outer(coordinate, [1.0, 1e-4]) for coordinate in (x, y)]
  expected = np.concatenate(
      [f(angle) for angle in angles for f in (np.sin, np.cos)], axis=1)
  np.testing.assert_allclose(posemb_sincos_2d(2, 2, 8), expected[None],
                             rtol=1e-6, atol=1e-7)


def test_sincos2d_model_has_no_posemb_parameter_and_zero_for_cls():
  images = helpers.images()
  sincos, learned = helpers.small_vit(posemb='sincos2d'), helpers.small_vit()
  params = helpers.random_params(learned, images, train=False)
  transformer = dict(params['Transformer'])
  del transformer['posembed_input']
  sincos_params = {**params, 'Transformer': transformer}
  assert helpers.param_shapes(sincos, images) == helpers.shapes(sincos_params)
  # The same as the learned embedding set to [0 for cls; sincos of 4x4].
  fixed = jnp.concatenate([jnp.zeros(
      (1, 1, 32)), posemb_sincos_2d(4, 4, 32)], axis=1)
  transformer = {**transformer, 'posembed_input': {'pos_embedding': fixed}}
  np.testing.assert_allclose(
      sincos.apply({'params': sincos_params}, images, train=False),
      learned.apply({'params': {**params, 'Transformer': transformer}}, images,
                    train=False), rtol=1e-6, atol=1e-6)

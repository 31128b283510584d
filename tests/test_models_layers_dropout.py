"""Hash-based dropout: nn.Dropout's semantics; drop-path built on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models.layers.dropout import DropPath
from vit_jax.models.layers.dropout import Dropout
from vit_jax.models.layers.dropout import drop_path_rates
from vit_jax.models.layers.dropout import hash_bits
from tests import helpers


def _apply(rate, x, seed, deterministic=False):
  return Dropout(rate).apply({}, x, deterministic=deterministic,
                             rngs={'dropout': jax.random.key(seed)})


def test_keeps_the_right_fraction_and_rescales():
  rate = 0.1  # Not 0.5: keeping `rate` instead of `1 - rate` would pass.
  y = np.asarray(_apply(rate, jnp.ones((64, 65, 128)), 0))
  kept = y != 0
  assert abs(kept.mean() - (1 - rate)) < 0.005
  np.testing.assert_allclose(y[kept], 1 / (1 - rate), rtol=1e-6)


def test_masks_are_fresh_per_rng_and_reproducible_and_off_in_eval():
  x = jnp.ones((8, 17, 32))
  np.testing.assert_array_equal(_apply(0.5, x, 1), _apply(0.5, x, 1))
  assert not np.array_equal(_apply(0.5, x, 1), _apply(0.5, x, 2))
  x = helpers.normal((4, 5), 0)
  np.testing.assert_array_equal(_apply(0.5, x, 0, deterministic=True), x)
  np.testing.assert_array_equal(_apply(0.0, x, 0), x)
  assert not np.any(_apply(1.0, x, 0))


def test_bits_are_uniform_and_uncorrelated_across_positions():
  u = np.asarray(hash_bits(jax.random.key(3), (256, 256)), np.float64) / 2**32
  assert abs(u.mean() - 0.5) < 0.005
  assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.01
  assert abs(np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]) < 0.01


def test_drop_path_drops_whole_examples():
  x = jnp.ones((256, 3, 4))
  y = np.asarray(
      DropPath(0.5).apply({}, x, deterministic=False,
                          rngs={'dropout': jax.random.key(0)}))
  per_example = y.reshape(256, -1)
  assert np.all(per_example == per_example[:, :1])  # All of it, or none.
  assert set(np.unique(per_example)) == {0.0, 2.0}
  assert 0.35 < np.mean(per_example[:, 0] == 0) < 0.65
  np.testing.assert_array_equal(
      DropPath(0.5).apply({}, x, deterministic=True), x)
  assert drop_path_rates(0.3, 4) == pytest.approx([0.0, 0.1, 0.2, 0.3])
  assert drop_path_rates(0.3, 1) == [0.0]


def test_stochastic_depth_is_train_only_and_adds_no_parameters():
  images, plain = helpers.images(batch=8), helpers.small_vit()
  deep = helpers.small_vit(stochastic_depth_rate=0.99)
  assert helpers.param_shapes(deep,
                              images) == helpers.param_shapes(plain, images)
  params = {'params': helpers.random_params(plain, images, train=False)}
  evaluated = plain.apply(params, images, train=False)
  run = lambda train, seed: deep.apply(params, images, train=train, rngs=
                                       {'dropout': jax.random.key(seed)})
  np.testing.assert_array_equal(run(False, 1), evaluated)
  # The last block's branches are dropped, or kept and scaled by 100, so no
  # example comes out as in eval.
  same = np.all(np.isclose(run(True, 1), evaluated, rtol=1e-5, atol=1e-5),
                axis=-1)
  assert not np.any(same)

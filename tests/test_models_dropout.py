"""Hash-based dropout: nn.Dropout's semantics."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models.dropout import Dropout
from vit_jax.models.dropout import hash_bits


def _apply(rate, x, seed, deterministic=False):
  return Dropout(rate).apply({}, x, deterministic=deterministic,
                             rngs={'dropout': jax.random.key(seed)})


@pytest.mark.parametrize('rate', [0.1, 0.5])
def test_keeps_the_right_fraction_and_rescales(rate):
  x = jnp.ones((64, 65, 128))
  y = np.asarray(_apply(rate, x, 0))
  kept = y != 0
  assert abs(kept.mean() - (1 - rate)) < 0.005
  np.testing.assert_allclose(y[kept], 1 / (1 - rate), rtol=1e-6)


def test_masks_are_fresh_per_rng_and_reproducible():
  x = jnp.ones((8, 17, 32))
  np.testing.assert_array_equal(_apply(0.5, x, 1), _apply(0.5, x, 1))
  assert not np.array_equal(_apply(0.5, x, 1), _apply(0.5, x, 2))


def test_bits_are_uniform_and_uncorrelated_across_positions():
  bits = np.asarray(hash_bits(jax.random.key(3), (256, 256)), np.float64)
  u = bits / 2**32
  assert abs(u.mean() - 0.5) < 0.005
  assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.01
  assert abs(np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]) < 0.01


def test_identity_when_deterministic_or_rate_zero():
  x = jax.random.normal(jax.random.key(0), (4, 5))
  np.testing.assert_array_equal(_apply(0.5, x, 0, deterministic=True), x)
  np.testing.assert_array_equal(_apply(0.0, x, 0), x)
  assert not np.any(_apply(1.0, x, 0))


def test_matches_flax_dropout_in_distribution():
  x = jnp.ones((200_000,))
  ours = _apply(0.3, x, 0)
  flax_out = nn.Dropout(0.3).apply({}, x, deterministic=False,
                                   rngs={'dropout': jax.random.key(0)})
  assert abs(float(ours.mean()) - float(flax_out.mean())) < 0.01

"""Inverted dropout with masks from a counter-based hash, and drop-path
(stochastic depth), the same dropout with one mask value per example.

Same semantics as `flax.linen.Dropout` (keep each element with probability
1 - rate, scale kept ones by 1 / (1 - rate), one fresh 'dropout' rng per call),
but the mask is a hash of each element's index and a per-call seed instead of
a threefry stream. With jax's sharding-invariant threefry, the masks of the
ViT-Tiny train step cost about a third of the whole step on a CPU
(experiments/benchmarks/README.md); the hash is ~50x cheaper and equally
independent of how the batch is sharded, since it depends on global indices.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def _mix(x: jax.Array) -> jax.Array:
  # MurmurHash3's 32-bit finaliser: a bijection with full avalanche.
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  return x ^ (x >> 16)


def hash_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """Uniform uint32 bits of `shape`: the seed hashed with each index in turn."""
  seeds = jax.random.bits(key, (len(shape) + 1,), jnp.uint32)
  bits = jnp.broadcast_to(seeds[0], (1,) * len(shape))
  for axis, size in enumerate(shape):
    index_shape = [1] * len(shape)
    index_shape[axis] = size
    index = jax.lax.iota(jnp.uint32, size).reshape(index_shape)
    bits = _mix(bits ^ (index + seeds[axis + 1]))
  return jnp.broadcast_to(bits, shape)


class Dropout(nn.Module):
  """Drop-in for `nn.Dropout` (no parameters, so no change to the tree);
  as there, `broadcast_dims` share one mask value along those axes."""

  rate: float
  broadcast_dims: Sequence[int] = ()

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    if deterministic or self.rate == 0.0:
      return x
    if self.rate == 1.0:
      return jnp.zeros_like(x)
    keep_prob = 1.0 - self.rate
    threshold = jnp.uint32(min(round(keep_prob * 2**32), 2**32 - 1))
    mask_shape = tuple(1 if axis in self.broadcast_dims else size
                       for axis, size in enumerate(x.shape))
    keep = hash_bits(self.make_rng('dropout'), mask_shape) < threshold
    return jnp.where(keep, x / jnp.asarray(keep_prob, x.dtype),
                     jnp.zeros((), x.dtype))


def DropPath(rate: float, name: str | None = None) -> Dropout:  # pylint: disable=invalid-name
  """Stochastic depth (Huang et al. 2016), as DeiT trains: drops a residual
  branch for whole examples, with probability `rate`, and scales the kept
  ones by 1 / (1 - rate), so that eval (`deterministic`, the identity) sees
  the expected value. `Dropout` with its mask broadcast over tokens and
  channels (one bit per example); no parameters, and rate 0 draws no rng,
  so it leaves the other dropout masks as they were."""
  return Dropout(rate, broadcast_dims=(1, 2), name=name)


def drop_path_rates(stochastic_depth_rate: float,
                    num_layers: int) -> list[float]:
  """Each block's drop-path rate: growing linearly from 0 at the first block
  to `stochastic_depth_rate` at the last (DeiT, timm), since the early
  blocks' features are the ones every later block builds on. A single block
  gets 0, as in timm."""
  if num_layers < 2:
    return [0.0] * num_layers
  return [stochastic_depth_rate * i / (num_layers - 1)
          for i in range(num_layers)]

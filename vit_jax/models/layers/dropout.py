"""Dropout and drop-path whose masks hash each element's global index."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def _mix(x: jax.Array) -> jax.Array:
  # MurmurHash3's 32-bit finalizer: a bijection with full avalanche.
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  return x ^ (x >> 16)


# Far cheaper than threefry masks (experiments/benchmarks/README.md, Attempts).
def hash_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """Uniform uint32 bits of `shape`: the seed hashed with each index in turn."""
  seeds = jax.random.bits(key, (len(shape) + 1,), jnp.uint32)
  bits = jnp.broadcast_to(seeds[0], (1,) * len(shape))
  for axis, size in enumerate(shape):
    others = [other for other in range(len(shape)) if other != axis]
    index = jnp.expand_dims(jax.lax.iota(jnp.uint32, size), others)
    bits = _mix(bits ^ (index + seeds[axis + 1]))
  return jnp.broadcast_to(bits, shape)


class Dropout(nn.Module):
  """Drop-in for `nn.Dropout`; `broadcast_dims` share one mask value."""

  rate: float
  broadcast_dims: Sequence[int] = ()

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    if deterministic or self.rate == 0.0:  # no rng drawn: other masks unchanged
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
  """Stochastic depth (Huang et al. 2016): drops whole examples' branch."""
  return Dropout(rate, broadcast_dims=(1, 2), name=name)


def drop_path_rates(stochastic_depth_rate: float,
                    num_layers: int) -> list[float]:
  """Drop-path rates rising linearly over the blocks from 0 (DeiT, timm)."""
  last = max(num_layers - 1, 1)
  return [stochastic_depth_rate * i / last for i in range(num_layers)]

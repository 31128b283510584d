"""What the classifier reads of the encoded tokens (`classifier`, one of
`CLASSIFIERS`): the prefix tokens ('token': [CLS], and DeiT's distillation
token after it), the mean of all ('gap'), or multihead attention pooling
('map', `MAPHead`, big_vision's), for little data."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models.layers.mlp import MlpBlock

Dtype = Any

CLASSIFIERS = ('token', 'gap', 'map')


def pooled_features(x: jax.Array, classifier: str, *, prefix_tokens: int,
                    num_heads: int, mlp_dim: int,
                    dtype: Dtype) -> list[jax.Array]:
  """(batch, hidden) features of (batch, tokens, hidden) `x`, one per head
  the model has: each prefix token's for 'token', else one. Called in a
  compact method, the MAP head is the caller's child (`names.MAP_HEAD`)."""
  if classifier == 'token':
    return [x[:, i] for i in range(prefix_tokens)]
  if classifier == 'gap':
    return [jnp.mean(x, axis=1)]
  return [MAPHead(num_heads=num_heads, mlp_dim=mlp_dim, dtype=dtype,
                  name=names.MAP_HEAD)(x)]


class MAPHead(nn.Module):
  """Multihead attention pooling (big_vision's `MAPHead`): a learned `probe`
  token attends over all the encoder's output tokens, then goes through a
  LayerNorm-MLP residual block; the result is the pooled representation.

  Unlike [CLS] the probe does not take part in the encoder, and unlike the
  mean it weights the tokens by relevance. Module names are big_vision's
  (`probe`, `MultiHeadDotProductAttention_0`, `LayerNorm_0`, `MlpBlock_0`),
  so its MAP heads load as they are. No dropout in the head, as there.
  """

  num_heads: int
  mlp_dim: int
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    n, _, d = x.shape
    probe = self.param('probe', nn.initializers.xavier_uniform(), (1, 1, d))
    probe = jnp.broadcast_to(probe.astype(x.dtype), (n, 1, d))
    x = nn.MultiHeadDotProductAttention(
        num_heads=self.num_heads,
        dtype=self.dtype,
        kernel_init=nn.initializers.xavier_uniform(),
        force_fp32_for_softmax=True,
        name=names.ATTENTION)(probe, x)
    y = nn.LayerNorm(dtype=self.dtype)(x)
    x = x + MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype, name=names.MLP)(
        y, deterministic=True)
    return x[:, 0]

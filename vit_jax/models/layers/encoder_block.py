"""The Transformer's encoder block, the official pre-LayerNorm one, shared
by the ViT's encoder and its MAE decoder."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models.layers.attention import MultiHeadSelfAttention
from vit_jax.models.layers.dropout import DropPath
from vit_jax.models.layers.dropout import Dropout
from vit_jax.models.layers.mlp import MlpBlock

Dtype = Any


class Encoder1DBlock(nn.Module):
  """Pre-LayerNorm encoder block: x + MSA(LN(x)), then x + MLP(LN(x)).

  The attention probabilities are sown into the `intermediates` collection
  (`MultiHeadDotProductAttention_0/attention_weights`); see
  `vit.logits_and_attention`. `drop_path_rate` drops both residual branches
  for whole examples in training (`DropPath`); `locality` and
  `mimetic_init` are the attention's (`MultiHeadSelfAttention`).
  """

  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'auto'
  locality: bool = False
  mimetic_init: bool = False
  drop_path_rate: float = 0.0

  @nn.compact
  def __call__(self, inputs: jax.Array, *, deterministic: bool) -> jax.Array:
    x = nn.LayerNorm(dtype=self.dtype)(inputs)
    x = MultiHeadSelfAttention(
        num_heads=self.num_heads,
        dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        locality=self.locality,
        mimetic_init=self.mimetic_init,
        name=names.ATTENTION)(
            x, deterministic=deterministic)
    x = Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = DropPath(self.drop_path_rate, name='DropPath_0')(
        x, deterministic=deterministic)
    x = x + inputs

    y = nn.LayerNorm(dtype=self.dtype)(x)
    y = MlpBlock(
        mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate, dtype=self.dtype,
        name=names.MLP)(
            y, deterministic=deterministic)
    y = DropPath(self.drop_path_rate, name='DropPath_1')(
        y, deterministic=deterministic)
    return x + y

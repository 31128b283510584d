"""The pre-LayerNorm encoder block, shared by the ViT and the MAE decoder."""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models.layers.attention import MultiHeadSelfAttention
from vit_jax.models.layers.dropout import DropPath
from vit_jax.models.layers.dropout import Dropout
from vit_jax.models.layers.mlp import MlpBlock


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockConfig:
  """What every encoder block of a model is made with, named as the ViT's fields."""

  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  attention: str = 'auto'
  locality_attention: bool = False
  mimetic_init: bool = False

  @classmethod
  def of(cls, model: Any) -> 'BlockConfig':
    """The block fields of `model` (a ViT), read by name."""
    fields = dataclasses.fields(cls)
    return cls(**{field.name: getattr(model, field.name) for field in fields})


class Encoder1DBlock(nn.Module):
  """x + MSA(LN(x)), then x + MLP(LN(x)), both branches drop-path'd."""

  config: BlockConfig
  drop_path_rate: float = 0.0

  @nn.compact
  def __call__(self, inputs: jax.Array, *, deterministic: bool) -> jax.Array:
    config = self.config
    x = nn.LayerNorm(dtype=config.dtype)(inputs)
    x = MultiHeadSelfAttention(
        num_heads=config.num_heads, dropout_rate=config.attention_dropout_rate,
        dtype=config.dtype, attention=config.attention,
        locality=config.locality_attention, mimetic_init=config.mimetic_init,
        name=names.ATTENTION)(x, deterministic=deterministic)
    x = Dropout(config.dropout_rate)(x, deterministic=deterministic)
    x = DropPath(self.drop_path_rate,
                 name='DropPath_0')(x, deterministic=deterministic)
    x = x + inputs

    y = nn.LayerNorm(dtype=config.dtype)(x)
    y = MlpBlock(mlp_dim=config.mlp_dim, dropout_rate=config.dropout_rate,
                 dtype=config.dtype,
                 name=names.MLP)(y, deterministic=deterministic)
    y = DropPath(self.drop_path_rate,
                 name='DropPath_1')(y, deterministic=deterministic)
    return x + y

"""What `VisionTransformer` adds for training on little data, each off by
default (then the model is the official one):

- `posemb_sincos_2d`: a fixed 2-D sine-cosine position embedding (MoCo v3,
  big_vision), nothing to learn;
- `DropPath`: stochastic depth (Huang et al. 2016), as DeiT trains;
- `MAPHead`: multihead attention pooling (big_vision);
- `shifted_patch_embedding`: shifted patch tokenization (Lee, Lee & Song
  2021); their locality self-attention is in `attention`;
- `mimetic_kernels`: mimetic initialisation of self-attention (Trockman &
  Kolter 2023), the initial kernels of `attention.MultiHeadSelfAttention`;
- `guidance_maps`: locality guidance's projections of encoder blocks' tokens
  to a CNN's stage widths (Li et al. 2022), parameters used only in
  training; the loss is `vit_jax.locality_guidance`'s.
DeiT's distillation token is a field of `VisionTransformer` itself.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import cnn
from vit_jax.models.dropout import Dropout
from vit_jax.models.mlp import MlpBlock

Dtype = Any


def check_sincos_width(width: int) -> None:
  if width % 4:
    raise ValueError(
        f"posemb='sincos2d' needs a hidden_size divisible by 4, got {width}: "
        "use a multiple of 4 or posemb='learned'.")


def posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.,
                     dtype: Dtype = jnp.float32) -> jax.Array:
  """Fixed 2-D sine-cosine position embedding of an h x w patch grid,
  shape (1, h * w, width), tokens in row-major order (as the patches).

  A quarter of the channels each holds sin(x w_k), cos(x w_k), sin(y w_k),
  cos(y w_k) for the column x and row y of the patch, with frequencies
  w_k = temperature^(-k / (width/4 - 1)) (MoCo v3, big_vision's
  `posemb_sincos_2d`). Nothing to learn, so a small data set cannot overfit
  it, and it extends to any grid size.
  """
  check_sincos_width(width)
  y, x = jnp.mgrid[:h, :w]
  quarter = width // 4
  # One frequency (1) when a quarter is one channel, where k / (quarter - 1)
  # would divide by zero.
  omega = jnp.arange(quarter) / max(quarter - 1, 1)
  omega = 1.0 / (temperature**omega)
  x = x.reshape(-1)[:, None] * omega[None, :]
  y = y.reshape(-1)[:, None] * omega[None, :]
  embedding = jnp.concatenate(
      [jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)], axis=1)
  return embedding[None].astype(dtype)


class AddSincos2dPositionEmbs(nn.Module):
  """Adds `posemb_sincos_2d` of the patch `grid` to the last rows * columns
  tokens (the patches), and zero to the tokens before them ([CLS],
  distillation), which have no place on the grid. No parameters."""

  grid: tuple[int, int]

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    h, w = self.grid
    prefix = tokens.shape[1] - h * w
    if prefix < 0:
      raise ValueError(f'{tokens.shape[1]} tokens cannot hold the {h}x{w} '
                       'patch grid: pass the grid the patches were cut into.')
    embedding = posemb_sincos_2d(h, w, tokens.shape[2], dtype=tokens.dtype)
    embedding = jnp.pad(embedding, ((0, 0), (prefix, 0), (0, 0)))
    return tokens + embedding


def DropPath(rate: float, name: str | None = None) -> Dropout:  # pylint: disable=invalid-name
  """Stochastic depth (Huang et al. 2016): drops a residual branch for whole
  examples, with probability `rate`, and scales the kept ones by
  1 / (1 - rate), so that eval (`deterministic`, the identity) sees the
  expected value. Our hash dropout with its mask broadcast over tokens and
  channels (one bit per example); no parameters, and rate 0 draws
  no rng, so it leaves the other dropout masks as they were."""
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
        name='MultiHeadDotProductAttention_0')(probe, x)
    y = nn.LayerNorm(dtype=self.dtype)(x)
    x = x + MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype)(
        y, deterministic=True)
    return x[:, 0]


def shifted_patch_tokens(images: jax.Array, patch_size: int) -> jax.Array:
  """Shifted patch tokenization's patches (Lee, Lee & Song 2021), before
  their LayerNorm and linear projection: shape (batch, rows, columns,
  patch_size**2 * 5 * channels).

  The images are concatenated along channels with four copies shifted by
  patch_size // 2 pixels up-left, up-right, down-left and down-right (zeros
  shifted in), then cut into patch_size x patch_size patches, each flattened
  (row, column, channel), as the 'embedding' conv's kernel. Each token thus
  also sees the pixels around its patch, a locality that a ViT trained on
  little data otherwise has to learn.
  """
  _, height, width, _ = images.shape
  s = patch_size // 2
  padded = jnp.pad(images, ((0, 0), (s, s), (s, s), (0, 0)))
  # The copy shifted by (dy, dx) is x[i - dy, j - dx]: padded[s - dy + i, ...].
  copies = [images] + [
      padded[:, s - dy:s - dy + height, s - dx:s - dx + width]
      for dy, dx in ((-s, -s), (-s, s), (s, -s), (s, s))
  ]
  return patch_grid(jnp.concatenate(copies, axis=-1), patch_size)


def patch_grid(images: jax.Array, patch_size: int) -> jax.Array:
  """(batch, height, width, channels) images cut into patches, each
  flattened (row, column, channel) as the 'embedding' conv's kernel:
  (batch, rows, columns, patch_size**2 * channels)."""
  n, height, width, channels = images.shape
  p = patch_size
  x = images.reshape(n, height // p, p, width // p, p, channels)
  x = x.transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, height // p, width // p, p * p * channels)


def check_shifted_patches(patch_size: int,
                          resnet_stages: tuple[int, ...] | None) -> None:
  if resnet_stages is not None:
    raise ValueError(
        'shifted_patches=True shifts image pixels and cannot follow a '
        'ResNet stem: set resnet_stages=None or shifted_patches=False.')
  if patch_size < 2:
    raise ValueError(
        f'shifted_patches=True shifts by half a patch, which '
        f'patch_size={patch_size} cannot give: use a patch_size of at '
        'least 2.')


def shifted_patch_embedding(images: jax.Array, patch_size: int,
                            hidden_size: int, dtype: Dtype) -> jax.Array:
  """Shifted patch tokenization as modules of the calling compact method
  (`shifted_patch_norm`, `shifted_patch_embedding` beside the ViT's other
  top-level modules): the shifted patches LayerNorm'd and projected, in place
  of the `embedding` conv. Shape (batch, rows, columns, hidden_size)."""
  x = shifted_patch_tokens(images, patch_size)
  x = nn.LayerNorm(dtype=dtype, name='shifted_patch_norm')(x)
  return nn.Dense(hidden_size, dtype=dtype, name='shifted_patch_embedding')(x)


# Trockman & Kolter's values for ViTs: W_q W_k^T ~ 0.7 Z + 0.7 I per head,
# W_v W_proj ~ 0.4 Z - 0.4 I, Z with N(0, 1/d) entries.
MIMETIC_QUERY_KEY = (0.7, 0.7)
MIMETIC_VALUE_OUT = (0.4, -0.4)


def _factors(key: jax.Array, size: int, noise: float,
             identity: float) -> tuple[jax.Array, jax.Array]:
  """`left`, `right` with left @ right = noise * Z + identity * I, Z of
  N(0, 1/size) entries; each takes the square root of the singular values,
  and the first k columns of `left` times the first k rows of `right` are
  the best rank-k approximation."""
  z = jax.random.normal(key, (size, size), jnp.float32) / jnp.sqrt(size)
  u, s, vh = jnp.linalg.svd(noise * z + identity * jnp.eye(size))
  root = jnp.sqrt(s)
  return u * root, root[:, None] * vh


def mimetic_kernels(key: jax.Array, hidden: int,
                    heads: int) -> dict[str, jax.Array]:
  """Initial `query`, `key`, `value` kernels (hidden, heads, head_dim) and
  `out` kernel (heads, head_dim, hidden) of mimetic initialisation (Trockman
  & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023):
  each head's W_q W_k^T is the best rank-head_dim approximation of
  0.7 Z + 0.7 I (a Z of its own), and W_v W_proj, the heads together, is
  0.4 Z - 0.4 I, so that attention starts out favouring each token's own
  and similar tokens, as in trained ViTs. Biases stay zero."""
  head_dim = hidden // heads
  query_key, value_out = jax.random.split(key)
  left, right = jax.vmap(lambda k: _factors(k, hidden, *MIMETIC_QUERY_KEY))(
      jax.random.split(query_key, heads))
  # (heads, hidden, head_dim) -> (hidden, heads, head_dim)
  query = left[:, :, :head_dim].transpose(1, 0, 2)
  key_kernel = right[:, :head_dim, :].transpose(2, 0, 1)
  value, out = _factors(value_out, hidden, *MIMETIC_VALUE_OUT)
  return {'query': query, 'key': key_kernel,
          'value': value.reshape(hidden, heads, head_dim),
          'out': out.reshape(heads, head_dim, hidden)}


# Names the projections of `guidance_maps` start with, at the top level of
# the ViT's parameters: `locality_guidance_0`, ...
GUIDANCE_PROJECTION = 'locality_guidance'


def check_guidance(guided_blocks: tuple[int, ...],
                   guidance_widths: tuple[int, ...], num_layers: int,
                   scan: bool) -> None:
  if len(guided_blocks) != len(guidance_widths):
    raise ValueError(
        f'guided_blocks={tuple(guided_blocks)} and guidance_widths='
        f'{tuple(guidance_widths)} must have one entry per CNN stage each: '
        'set both to the same length.')
  if list(guided_blocks) != sorted(set(guided_blocks)) or any(
      not 0 <= block < num_layers for block in guided_blocks):
    raise ValueError(
        f'guided_blocks={tuple(guided_blocks)}: list encoder blocks in '
        f'increasing order, each in 0..{num_layers - 1}.')
  if any(width < 1 for width in guidance_widths):
    raise ValueError(f'guidance_widths={tuple(guidance_widths)} must be '
                     'positive: the channels of the CNN\'s stages.')
  if guided_blocks and scan:
    raise ValueError('guided_blocks needs each block\'s output, which '
                     'scan=True does not keep: set scan=False.')


def guidance_maps(block_outputs: list[jax.Array], widths: tuple[int, ...],
                  grid: tuple[int, int], dtype: Dtype) -> list[jax.Array]:
  """Locality guidance (Li et al. 2022): the ViT's `guided_blocks` (in
  order), each imitating a CNN stage of `guidance_widths` channels for
  `vit_jax.locality_guidance`'s loss. Each guided block's patch tokens
  (batch, h * w, hidden), the prefix tokens dropped, are laid on the patch
  `grid` and projected by a 1x1 convolution with bias (a Dense per token,
  `GUIDANCE_PROJECTION_k`) to the width of its CNN stage: (batch, h, w,
  width). Called in a compact method, the projections are the caller's
  children."""
  maps = []
  for k, (tokens, width) in enumerate(zip(block_outputs, widths)):
    patches = tokens[:, tokens.shape[1] - grid[0] * grid[1]:]
    patches = patches.reshape(patches.shape[0], *grid, patches.shape[-1])
    # Initialised as PyTorch's Conv2d, the authors' projection.
    maps.append(nn.Dense(width, dtype=dtype,
                         kernel_init=cnn.torch_kernel_init,
                         bias_init=cnn.torch_bias_init(patches.shape[-1]),
                         name=f'{GUIDANCE_PROJECTION}_{k}')(patches))
  return maps

"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) in flax.linen.

Module names, nesting, shapes and initialisers follow the official linen model
(google-research/vision_transformer, `vit_jax/models_vit.py`), so the same
parameters give the same logits and released checkpoints load by renaming keys.

`VisionTransformer` also has optional techniques for training on little data
(sine-cosine position embedding, MAP head, stochastic depth, shifted patch
tokenization, locality self-attention, DeiT's distillation token); each is a
field whose default is off, and with all off the model is the official one.
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import resnet
from vit_jax.models.dropout import Dropout
from vit_jax.models.dropout import hash_bits

Dtype = Any

CLASSIFIERS = ('token', 'gap', 'map')
# 'learned': the official trained embedding; 'sincos2d': fixed sine-cosine of
# the patch grid (no parameters); 'none': no position information at all.
POSEMBS = ('learned', 'sincos2d', 'none')
# How MultiHeadSelfAttention computes softmax(q k^T / sqrt(head_dim)) v; the
# parameters are the same for all (see its docstring).
ATTENTIONS = ('einsum', 'dot_product_attention', 'cudnn')


def _check_attention(attention: str, attention_dropout_rate: float,
                     locality: bool = False):
  if attention not in ATTENTIONS:
    raise ValueError(f'attention={attention!r}; use one of {ATTENTIONS}.')
  if attention != 'einsum' and attention_dropout_rate > 0:
    raise ValueError(
        f'attention={attention!r} cannot drop attention probabilities '
        f'(attention_dropout_rate={attention_dropout_rate}); use '
        "attention='einsum'.")
  if attention != 'einsum' and locality:
    raise ValueError(
        f'attention={attention!r} cannot mask the diagonal or learn the '
        'temperature of locality self-attention (locality_attention=True); '
        "use attention='einsum'.")


def _is_power_of_4(n: int) -> bool:
  """Whether 1/sqrt(n) is a power of two, so scaling by it is exact."""
  return n > 0 and n & (n - 1) == 0 and (n.bit_length() - 1) % 2 == 0


class AddPositionEmbs(nn.Module):
  """Adds a learned 1-D position embedding, one vector per token."""

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    shape = (1, tokens.shape[1], tokens.shape[2])
    if self.has_variable('params', 'pos_embedding'):
      stored = self.get_variable('params', 'pos_embedding').shape
      if stored != shape:
        raise ValueError(
            f'The position embedding was made for {stored[1]} tokens but the '
            f'input gives {shape[1]}: the image size differs from the one the '
            'parameters were initialised at. Use that image size, or resize '
            'the position embedding to the new patch grid (fine-tuning).')
    # normal(0.02) as in BERT and the official ViT.
    pos_embedding = self.param(
        'pos_embedding', nn.initializers.normal(stddev=0.02), shape)
    return tokens + pos_embedding.astype(tokens.dtype)


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
  if width % 4:
    raise ValueError(f'The sincos2d position embedding needs a width '
                     f'divisible by 4, got {width}: use a hidden_size that is '
                     'a multiple of 4.')
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


class MlpBlock(nn.Module):
  """Transformer MLP: Dense -> GELU -> dropout -> Dense -> dropout."""

  mlp_dim: int
  dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    def dense(features):
      return nn.Dense(
          features,
          dtype=self.dtype,
          kernel_init=nn.initializers.xavier_uniform(),
          bias_init=nn.initializers.normal(stddev=1e-6))

    y = dense(self.mlp_dim)(x)
    y = nn.gelu(y)  # tanh approximation, as in the official code.
    y = Dropout(self.dropout_rate)(y, deterministic=deterministic)
    y = dense(x.shape[-1])(y)
    return Dropout(self.dropout_rate)(y, deterministic=deterministic)


class _Projection(nn.Module):
  """One attention projection's kernel and bias, nothing else.

  Initialised like flax's `DenseGeneral` (xavier_uniform on the kernel
  flattened to 2-D, zero bias), under the same names.
  """

  kernel_shape: tuple[int, ...]
  bias_shape: tuple[int, ...]
  fan_in_axes: int

  @nn.compact
  def __call__(self) -> tuple[jax.Array, jax.Array]:

    def kernel_init(key, shape, dtype=jnp.float32):
      fan_in = math.prod(shape[:self.fan_in_axes])
      flat_shape = (fan_in, math.prod(shape) // fan_in)
      flat = nn.initializers.xavier_uniform()(key, flat_shape, dtype)
      return flat.reshape(shape)

    return (self.param('kernel', kernel_init, self.kernel_shape),
            self.param('bias', nn.initializers.zeros, self.bias_shape))


class MultiHeadSelfAttention(nn.Module):
  """Multi-head self-attention with flax's parameters, in a faster layout.

  Same parameters (`query`, `key`, `value`: kernel (hidden, heads, head_dim);
  `out`: kernel (heads, head_dim, hidden)) and the same function as
  `nn.MultiHeadDotProductAttention`, whichever `attention` computes it:

  - `'einsum'` (default): in (batch, heads, tokens, head_dim) layout, which
    saves the transposes around the per-head matmuls
    (experiments/benchmarks/README.md), with a float32 softmax. The
    1/sqrt(head_dim) scale is folded into the query projection where that is
    exact or the computation is float32; in bfloat16 with a head_dim that is
    not a power of 4 (32, 80, ...) it scales the float32 logits instead, as
    folding would round the scale and every query weight once more. Sows the
    attention probabilities as `attention_weights`, and drops them out with
    `dropout_rate` in training.
  - `'dot_product_attention'`: `jax.nn.dot_product_attention` with
    `implementation=None`, jax's choice of kernel; in jax 0.10 that is XLA
    on every backend (float32 logits, float32 softmax).
  - `'cudnn'`: `jax.nn.dot_product_attention(implementation='cudnn')`,
    cuDNN's fused (flash) attention on NVIDIA GPUs: bfloat16 or float16
    `dtype`, head_dim a multiple of 8 up to 128 (256 from Hopper on); jax
    raises elsewhere. It never holds the (tokens x tokens) probabilities in
    memory.

  The fused kernels return no probabilities, so they can neither sow nor drop
  them out: a nonzero `dropout_rate` is an error there, and when the caller
  collects `intermediates` (`logits_and_attention`) the einsum path runs so
  that `attention_weights` are there.

  `locality` is the locality self-attention of Lee, Lee & Song (2021, "Vision
  Transformer for Small-Size Datasets"): the fixed 1/sqrt(head_dim) becomes
  a learned `temperature` per head (initialised to it, multiplied on the
  float32 logits, as the authors' code), and each token's logit for itself is
  masked out before
  the softmax. Both sharpen the attention towards other tokens, which ViTs
  trained on small data spread too evenly. Only the einsum path has it.
  """

  num_heads: int
  dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'einsum'
  locality: bool = False

  def __post_init__(self):
    _check_attention(self.attention, self.dropout_rate, self.locality)
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    hidden = x.shape[-1]
    heads, head_dim = self.num_heads, hidden // self.num_heads

    def projection(name):
      kernel, bias = _Projection((hidden, heads, head_dim), (heads, head_dim),
                                 fan_in_axes=1, name=name)()
      return kernel.astype(self.dtype), bias.astype(self.dtype)

    (wq, bq), (wk, bk), (wv, bv) = (projection(n)
                                    for n in ('query', 'key', 'value'))
    wo, bo = _Projection((heads, head_dim, hidden), (hidden,), fan_in_axes=2,
                         name='out')()
    wo, bo = wo.astype(self.dtype), bo.astype(self.dtype)
    x = x.astype(self.dtype)

    if (self.attention != 'einsum' and
        not self.is_mutable_collection('intermediates')):
      q, k, v = (jnp.einsum('btd,dhe->bthe', x, w) + b
                 for w, b in ((wq, bq), (wk, bk), (wv, bv)))
      out = jax.nn.dot_product_attention(
          q, k, v, scale=head_dim**-0.5,
          implementation='cudnn' if self.attention == 'cudnn' else None)
      return jnp.einsum('bthe,hed->btd', out, wo) + bo

    bq, bk, bv = bq[:, None, :], bk[:, None, :], bv[:, None, :]
    # Folding the scale into the query projection is exact when it is a power
    # of two; float32 keeps the fold whatever head_dim (its results pinned).
    # A learned temperature cannot be folded.
    fold = not self.locality and (jnp.finfo(self.dtype).bits >= 32 or
                                  _is_power_of_4(head_dim))
    if fold:
      scale = jnp.asarray(head_dim**-0.5, self.dtype)
      wq, bq = wq * scale, bq * scale
    q = jnp.einsum('btd,dhe->bhte', x, wq) + bq
    k = jnp.einsum('btd,dhe->bhte', x, wk) + bk
    v = jnp.einsum('btd,dhe->bhte', x, wv) + bv
    # float32 softmax: bfloat16 logits would lose the small probabilities.
    logits = jnp.einsum('bhqe,bhke->bhqk', q, k).astype(jnp.float32)
    if self.locality:
      temperature = self.param('temperature',
                               nn.initializers.constant(head_dim**-0.5),
                               (self.num_heads,))
      logits = logits * temperature.astype(jnp.float32)[:, None, None]
      # The lowest float rather than -inf: the same zero probability, and no
      # NaN for a sequence of one token (a row with nothing left).
      tokens = logits.shape[-1]
      logits = jnp.where(jnp.eye(tokens, dtype=bool),
                         jnp.finfo(jnp.float32).min, logits)
    elif not fold:
      logits = logits * jnp.float32(head_dim**-0.5)
    weights = jax.nn.softmax(logits).astype(self.dtype)
    self.sow('intermediates', 'attention_weights', weights)
    weights = Dropout(self.dropout_rate)(weights, deterministic=deterministic)
    out = jnp.einsum('bhqk,bhke->bhqe', weights, v)
    return jnp.einsum('bhte,hed->btd', out, wo) + bo


class Encoder1DBlock(nn.Module):
  """Pre-LayerNorm encoder block: x + MSA(LN(x)), then x + MLP(LN(x)).

  The attention probabilities are sown into the `intermediates` collection
  (`MultiHeadDotProductAttention_0/attention_weights`); apply with
  `mutable=['intermediates']` to get them, see `attention_weights`.

  `drop_path_rate` drops both residual branches (MSA and MLP) for whole
  examples in training (`DropPath`, stochastic depth); `locality` makes the
  attention locality self-attention (`MultiHeadSelfAttention`).
  """

  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'einsum'
  drop_path_rate: float = 0.0
  locality: bool = False

  @nn.compact
  def __call__(self, inputs: jax.Array, *, deterministic: bool) -> jax.Array:
    x = nn.LayerNorm(dtype=self.dtype)(inputs)
    x = MultiHeadSelfAttention(
        num_heads=self.num_heads,
        dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        locality=self.locality,
        name='MultiHeadDotProductAttention_0')(
            x, deterministic=deterministic)
    x = Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = DropPath(self.drop_path_rate, name='DropPath_0')(
        x, deterministic=deterministic)
    x = x + inputs

    y = nn.LayerNorm(dtype=self.dtype)(x)
    y = MlpBlock(
        mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate, dtype=self.dtype)(
            y, deterministic=deterministic)
    y = DropPath(self.drop_path_rate, name='DropPath_1')(
        y, deterministic=deterministic)
    return x + y


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


class Encoder(nn.Module):
  """Position embedding, `num_layers` encoder blocks and a final LayerNorm.

  `posemb` (one of `POSEMBS`) is the position embedding: 'learned' (the
  official `posembed_input`), 'sincos2d' (fixed, `AddSincos2dPositionEmbs`;
  it needs `grid`, the (rows, columns) of patches the last tokens come from)
  or 'none'. `stochastic_depth_rate` is the last block's drop-path rate
  (`drop_path_rates`); `locality_attention` gives every block locality
  self-attention.
  """

  num_layers: int
  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'einsum'
  posemb: str = 'learned'
  stochastic_depth_rate: float = 0.0
  locality_attention: bool = False

  def __post_init__(self):
    if self.posemb not in POSEMBS:
      raise ValueError(f'posemb={self.posemb!r}; use one of {POSEMBS}.')
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool,
               grid: tuple[int, int] | None = None) -> jax.Array:
    if self.posemb == 'learned':
      x = AddPositionEmbs(name='posembed_input')(x)
    elif self.posemb == 'sincos2d':
      if grid is None:
        raise ValueError("posemb='sincos2d' needs the patch grid: call the "
                         'Encoder with grid=(rows, columns).')
      x = AddSincos2dPositionEmbs(grid, name='posembed_sincos2d')(x)
    x = Dropout(self.dropout_rate)(x, deterministic=not train)
    rates = drop_path_rates(self.stochastic_depth_rate, self.num_layers)
    for i in range(self.num_layers):
      x = Encoder1DBlock(
          mlp_dim=self.mlp_dim,
          num_heads=self.num_heads,
          dropout_rate=self.dropout_rate,
          attention_dropout_rate=self.attention_dropout_rate,
          dtype=self.dtype,
          attention=self.attention,
          drop_path_rate=rates[i],
          locality=self.locality_attention,
          name=f'encoderblock_{i}')(
              x, deterministic=not train)
    return nn.LayerNorm(dtype=self.dtype, name='encoder_norm')(x)


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
  n, height, width, channels = images.shape
  s = patch_size // 2
  padded = jnp.pad(images, ((0, 0), (s, s), (s, s), (0, 0)))
  # The copy shifted by (dy, dx) is x[i - dy, j - dx]: padded[s - dy + i, ...].
  copies = [images] + [
      padded[:, s - dy:s - dy + height, s - dx:s - dx + width]
      for dy, dx in ((-s, -s), (-s, s), (s, -s), (s, s))
  ]
  x = jnp.concatenate(copies, axis=-1)
  p = patch_size
  x = x.reshape(n, height // p, p, width // p, p, 5 * channels)
  x = x.transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, height // p, width // p, p * p * 5 * channels)


class VisionTransformer(nn.Module):
  """ViT: patch embedding, [CLS] token, Transformer encoder, classifier head.

  Parameters stay in float32 whatever `dtype` is; `dtype` sets the computation
  (e.g. `jnp.bfloat16`). The optional `pre_logits` and the `head` always
  compute in float32, so logits are float32.

  With `resnet_stages` set, this is the paper's hybrid: the images first go
  through a ResNet stem (`models.resnet.resnet_stem`: the root, then one stage
  of that many bottleneck units per entry, of width 64 * `resnet_width_factor`
  in the first stage), whose modules `conv_root`, `gn_root`, `block1`, ... sit
  at the top level of the parameters as in the official tree, and
  `patch_size` is the patch size on the stem's feature map (1 for
  R50+ViT-B_16: (3, 4, 9) stages downsample 224x224 images to 14x14x1024).

  `attention` picks how every block computes its attention, with the same
  parameters (`MultiHeadSelfAttention`): `'einsum'` (default) is this
  project's own, the one that can sow the attention maps and apply
  `attention_dropout_rate`; `'dot_product_attention'` is
  `jax.nn.dot_product_attention` with jax's choice of kernel (XLA in jax
  0.10); `'cudnn'` is its cuDNN fused attention, for NVIDIA GPUs with a
  bfloat16 or float16 `dtype`, which never stores the tokens x tokens
  probabilities.
  The fused two need `attention_dropout_rate=0` (the registered models'),
  and `logits_and_attention` works with any of them.

  Techniques for training on little data, all off by default (then the
  parameters and function are the official model's):

  - `posemb`: 'learned' (default, `Transformer/posembed_input`), 'sincos2d'
    (fixed 2-D sine-cosine of the patch grid, `posemb_sincos_2d`; zero for
    the [CLS] and distillation tokens; hidden_size a multiple of 4; no
    parameters) or 'none' (no position information: the model is then
    invariant to permuting the patches with classifier 'gap' or 'map').
  - `classifier='map'`: multihead attention pooling (`MAPHead`, module
    `MAPHead_0`) instead of [CLS] ('token') or the mean ('gap'); no [CLS].
  - `stochastic_depth_rate`: drop path on both residual branches of every
    block in training, linearly from 0 at the first block to this rate at
    the last (`drop_path_rates`); needs the 'dropout' rng. No parameters.
  - `shifted_patches`: shifted patch tokenization (`shifted_patch_tokens`),
    the patches LayerNorm'd (`shifted_patch_norm`) and projected
    (`shifted_patch_embedding`) in place of the `embedding` conv; needs a
    patch_size of at least 2 and no ResNet stem.
  - `locality_attention`: locality self-attention in every block (a learned
    `temperature` per head in each `MultiHeadDotProductAttention_0`,
    self-attention masked); needs attention='einsum'.
  - `distillation_token` (DeiT): a learned `dist` token right after `cls`
    and its own head `head_dist`; needs classifier='token'. Then the model
    returns, with `train=True`, the tuple (class logits, distillation logits)
    for the two losses (labels; teacher), and with `train=False` their
    average (class logits + distillation logits) / 2, DeiT's prediction.
  """

  num_classes: int
  patch_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  classifier: str = 'token'
  representation_size: int | None = None
  head_bias_init: float = 0.0
  dtype: Dtype = jnp.float32
  resnet_stages: tuple[int, ...] | None = None
  resnet_width_factor: int = 1
  attention: str = 'einsum'
  posemb: str = 'learned'
  stochastic_depth_rate: float = 0.0
  shifted_patches: bool = False
  locality_attention: bool = False
  distillation_token: bool = False

  @property
  def effective_patch_size(self) -> int:
    """Side, in image pixels, of the square each token comes from: the patch
    size, times the ResNet stem's stride for a hybrid (16 for R50+ViT-B_16)."""
    if self.resnet_stages is None:
      return self.patch_size
    return resnet.stem_stride(self.resnet_stages) * self.patch_size

  @property
  def prefix_tokens(self) -> tuple[str, ...]:
    """The tokens before the patches, in order: 'cls' (classifier 'token'),
    then 'dist' (`distillation_token`)."""
    return (('cls',) if self.classifier == 'token' else ()) + (
        ('dist',) if self.distillation_token else ())

  def check_image_size(self, height: int, width: int) -> None:
    """Raises ValueError unless the patches tile a height x width image."""
    size = self.effective_patch_size
    if not (height % size or width % size):
      return
    if self.resnet_stages is not None:
      stride = resnet.stem_stride(self.resnet_stages)
      raise ValueError(
          f'Image size {height}x{width} is not divisible by {size}, the '
          f'ResNet stem\'s stride {stride} times the patch size '
          f'{self.patch_size} on its feature map: resize or crop the images '
          f'to a multiple of {size}.')
    raise ValueError(
        f'Image size {height}x{width} is not divisible by the patch size '
        f'{self.patch_size}: resize or crop the images to a multiple of '
        f'{self.patch_size}.')

  def __post_init__(self):
    if self.classifier not in CLASSIFIERS:
      raise ValueError(f'classifier={self.classifier!r}; use one of '
                       f'{CLASSIFIERS}.')
    _check_attention(self.attention, self.attention_dropout_rate,
                     self.locality_attention)
    if self.hidden_size % self.num_heads:
      raise ValueError(f'hidden_size={self.hidden_size} is not divisible by '
                       f'num_heads={self.num_heads}.')
    if self.patch_size < 1:
      raise ValueError(f'patch_size={self.patch_size} must be positive.')
    if self.resnet_stages is not None:
      resnet.validate_stem(self.resnet_stages, self.resnet_width_factor)
    if self.posemb not in POSEMBS:
      raise ValueError(f'posemb={self.posemb!r}; use one of {POSEMBS}.')
    if self.posemb == 'sincos2d' and self.hidden_size % 4:
      raise ValueError(
          f"posemb='sincos2d' needs a hidden_size divisible by 4, got "
          f"{self.hidden_size}: use a multiple of 4 or posemb='learned'.")
    if not 0.0 <= self.stochastic_depth_rate < 1.0:
      raise ValueError(
          f'stochastic_depth_rate={self.stochastic_depth_rate} must be in '
          '[0, 1): it is the probability of dropping the last block.')
    if self.shifted_patches and self.resnet_stages is not None:
      raise ValueError(
          'shifted_patches=True shifts image pixels and cannot follow a '
          'ResNet stem: set resnet_stages=None or shifted_patches=False.')
    if self.shifted_patches and self.patch_size < 2:
      raise ValueError(
          f'shifted_patches=True shifts by half a patch, which '
          f'patch_size={self.patch_size} cannot give: use a patch_size of at '
          'least 2.')
    if self.distillation_token and self.classifier != 'token':
      raise ValueError(
          f'distillation_token=True needs classifier=\'token\' (DeiT reads the '
          f'[CLS] and distillation tokens), got classifier='
          f'{self.classifier!r}.')
    super().__post_init__()

  @nn.compact
  def __call__(self, images: jax.Array, *,
               train: bool) -> jax.Array | tuple[jax.Array, jax.Array]:
    if images.ndim != 4:
      raise ValueError(f'Expected images of shape (batch, height, width, '
                       f'channels), got shape {images.shape}.')
    self.check_image_size(*images.shape[1:3])

    x = images
    if self.resnet_stages is not None:
      # The official hybrid's stem, its modules directly in this one's scope.
      x = resnet.resnet_stem(x, self.resnet_stages, self.resnet_width_factor,
                             self.dtype)

    if self.shifted_patches:
      x = shifted_patch_tokens(x, self.patch_size)
      x = nn.LayerNorm(dtype=self.dtype, name='shifted_patch_norm')(x)
      x = nn.Dense(self.hidden_size, dtype=self.dtype,
                   name='shifted_patch_embedding')(x)
    else:
      # A conv with kernel = stride = patch size is the linear patch
      # projection.
      x = nn.Conv(
          self.hidden_size,
          kernel_size=(self.patch_size, self.patch_size),
          strides=(self.patch_size, self.patch_size),
          padding='VALID',
          dtype=self.dtype,
          name='embedding')(
              x)
    n, h, w, c = x.shape
    x = jnp.reshape(x, (n, h * w, c))

    def token(name, init):
      value = self.param(name, init, (1, 1, c))
      return jnp.broadcast_to(value.astype(x.dtype), (n, 1, c))

    prefix = []
    if self.classifier == 'token':
      prefix.append(token('cls', nn.initializers.zeros))
    if self.distillation_token:
      # Not zero like [CLS]: with a position embedding of zero ('sincos2d',
      # 'none') the two tokens would start out identical.
      prefix.append(token('dist', nn.initializers.normal(stddev=0.02)))
    if prefix:
      x = jnp.concatenate(prefix + [x], axis=1)

    x = Encoder(
        num_layers=self.num_layers,
        mlp_dim=self.mlp_dim,
        num_heads=self.num_heads,
        dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        posemb=self.posemb,
        stochastic_depth_rate=self.stochastic_depth_rate,
        locality_attention=self.locality_attention,
        name='Transformer')(
            x, train=train, grid=(h, w))

    if self.classifier == 'token':
      features = [x[:, 0]]
      if self.distillation_token:
        features.append(x[:, 1])
    elif self.classifier == 'gap':
      features = [jnp.mean(x, axis=1)]
    else:
      features = [MAPHead(num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                          dtype=self.dtype, name='MAPHead_0')(x)]

    if self.representation_size is not None:
      pre_logits = nn.Dense(self.representation_size, name='pre_logits')
      features = [nn.tanh(pre_logits(f)) for f in features]

    def head(name):
      return nn.Dense(
          self.num_classes,
          kernel_init=nn.initializers.zeros,
          bias_init=nn.initializers.constant(self.head_bias_init),
          name=name)

    logits = head('head')(features[0])
    if not self.distillation_token:
      return logits
    distillation_logits = head('head_dist')(features[1])
    if train:
      return logits, distillation_logits
    return (logits + distillation_logits) / 2


def logits_and_attention(model: VisionTransformer, variables: Any,
                         images: jax.Array) -> tuple[jax.Array,
                                                     list[jax.Array]]:
  """The logits of `images` in eval mode, and every layer's attention
  probabilities: one array per encoder block, in depth order, each of shape
  (batch, heads, tokens, tokens) with rows (queries) summing to 1. With a
  `distillation_token` the logits are the average of its two heads'.

  Works whatever the model's `attention`: collecting `intermediates` makes the
  fused ones compute the einsum way, the one that sows the probabilities (the
  same function: logits equal to float32 rounding)."""
  logits, state = model.apply(
      variables, images, train=False, mutable=['intermediates'])
  blocks = state['intermediates']['Transformer']
  return logits, [
      blocks[f'encoderblock_{i}']['MultiHeadDotProductAttention_0']
      ['attention_weights'][0] for i in range(model.num_layers)
  ]


def attention_weights(model: VisionTransformer, variables: Any,
                      images: jax.Array) -> list[jax.Array]:
  """Every layer's attention probabilities for `images`, in eval mode
  (`logits_and_attention`)."""
  return logits_and_attention(model, variables, images)[1]

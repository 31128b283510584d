"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) in flax.linen.

Module names, nesting, shapes and initialisers follow the official linen model
(google-research/vision_transformer, `vit_jax/models_vit.py`), so the same
parameters give the same logits and released checkpoints load by renaming keys.
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import resnet
from vit_jax.models.dropout import Dropout

Dtype = Any

CLASSIFIERS = ('token', 'gap')
# How MultiHeadSelfAttention computes softmax(q k^T / sqrt(head_dim)) v; the
# parameters are the same for all (see its docstring).
ATTENTIONS = ('einsum', 'dot_product_attention', 'cudnn')


def _check_attention(attention: str, attention_dropout_rate: float):
  if attention not in ATTENTIONS:
    raise ValueError(f'attention={attention!r}; use one of {ATTENTIONS}.')
  if attention != 'einsum' and attention_dropout_rate > 0:
    raise ValueError(
        f'attention={attention!r} cannot drop attention probabilities '
        f'(attention_dropout_rate={attention_dropout_rate}); use '
        "attention='einsum'.")


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
  """

  num_heads: int
  dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'einsum'

  def __post_init__(self):
    _check_attention(self.attention, self.dropout_rate)
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
    fold = (jnp.finfo(self.dtype).bits >= 32 or _is_power_of_4(head_dim))
    if fold:
      scale = jnp.asarray(head_dim**-0.5, self.dtype)
      wq, bq = wq * scale, bq * scale
    q = jnp.einsum('btd,dhe->bhte', x, wq) + bq
    k = jnp.einsum('btd,dhe->bhte', x, wk) + bk
    v = jnp.einsum('btd,dhe->bhte', x, wv) + bv
    # float32 softmax: bfloat16 logits would lose the small probabilities.
    logits = jnp.einsum('bhqe,bhke->bhqk', q, k).astype(jnp.float32)
    if not fold:
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
  """

  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'einsum'

  @nn.compact
  def __call__(self, inputs: jax.Array, *, deterministic: bool) -> jax.Array:
    x = nn.LayerNorm(dtype=self.dtype)(inputs)
    x = MultiHeadSelfAttention(
        num_heads=self.num_heads,
        dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        name='MultiHeadDotProductAttention_0')(
            x, deterministic=deterministic)
    x = Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = x + inputs

    y = nn.LayerNorm(dtype=self.dtype)(x)
    y = MlpBlock(
        mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate, dtype=self.dtype)(
            y, deterministic=deterministic)
    return x + y


class Encoder(nn.Module):
  """Position embedding, `num_layers` encoder blocks and a final LayerNorm."""

  num_layers: int
  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'einsum'

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
    x = AddPositionEmbs(name='posembed_input')(x)
    x = Dropout(self.dropout_rate)(x, deterministic=not train)
    for i in range(self.num_layers):
      x = Encoder1DBlock(
          mlp_dim=self.mlp_dim,
          num_heads=self.num_heads,
          dropout_rate=self.dropout_rate,
          attention_dropout_rate=self.attention_dropout_rate,
          dtype=self.dtype,
          attention=self.attention,
          name=f'encoderblock_{i}')(
              x, deterministic=not train)
    return nn.LayerNorm(dtype=self.dtype, name='encoder_norm')(x)


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

  @property
  def effective_patch_size(self) -> int:
    """Side, in image pixels, of the square each token comes from: the patch
    size, times the ResNet stem's stride for a hybrid (16 for R50+ViT-B_16)."""
    if self.resnet_stages is None:
      return self.patch_size
    return resnet.stem_stride(self.resnet_stages) * self.patch_size

  def __post_init__(self):
    if self.classifier not in CLASSIFIERS:
      raise ValueError(f'classifier={self.classifier!r}; use one of '
                       f'{CLASSIFIERS}.')
    _check_attention(self.attention, self.attention_dropout_rate)
    if self.hidden_size % self.num_heads:
      raise ValueError(f'hidden_size={self.hidden_size} is not divisible by '
                       f'num_heads={self.num_heads}.')
    if self.patch_size < 1:
      raise ValueError(f'patch_size={self.patch_size} must be positive.')
    if self.resnet_stages is not None:
      resnet.validate_stem(self.resnet_stages, self.resnet_width_factor)
    super().__post_init__()

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool) -> jax.Array:
    if images.ndim != 4:
      raise ValueError(f'Expected images of shape (batch, height, width, '
                       f'channels), got shape {images.shape}.')
    _, height, width, _ = images.shape
    size = self.effective_patch_size
    if self.resnet_stages is not None and (height % size or width % size):
      stride = resnet.stem_stride(self.resnet_stages)
      raise ValueError(
          f'Image size {height}x{width} is not divisible by {size}, the '
          f'ResNet stem\'s stride {stride} times the patch size '
          f'{self.patch_size} on its feature map: resize or crop the images '
          f'to a multiple of {size}.')
    if height % size or width % size:
      raise ValueError(
          f'Image size {height}x{width} is not divisible by the patch size '
          f'{self.patch_size}: resize or crop the images to a multiple of '
          f'{self.patch_size}.')

    x = images
    if self.resnet_stages is not None:
      # The official hybrid's stem, its modules directly in this one's scope.
      x = resnet.resnet_stem(x, self.resnet_stages, self.resnet_width_factor,
                             self.dtype)

    # A conv with kernel = stride = patch size is the linear patch projection.
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

    if self.classifier == 'token':
      cls = self.param('cls', nn.initializers.zeros, (1, 1, c))
      cls = jnp.broadcast_to(cls.astype(x.dtype), (n, 1, c))
      x = jnp.concatenate([cls, x], axis=1)

    x = Encoder(
        num_layers=self.num_layers,
        mlp_dim=self.mlp_dim,
        num_heads=self.num_heads,
        dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        name='Transformer')(
            x, train=train)

    x = x[:, 0] if self.classifier == 'token' else jnp.mean(x, axis=1)

    if self.representation_size is not None:
      x = nn.Dense(self.representation_size, name='pre_logits')(x)
      x = nn.tanh(x)

    return nn.Dense(
        self.num_classes,
        kernel_init=nn.initializers.zeros,
        bias_init=nn.initializers.constant(self.head_bias_init),
        name='head')(
            x)


def logits_and_attention(model: VisionTransformer, variables: Any,
                         images: jax.Array) -> tuple[jax.Array,
                                                     list[jax.Array]]:
  """The logits of `images` in eval mode, and every layer's attention
  probabilities: one array per encoder block, in depth order, each of shape
  (batch, heads, tokens, tokens) with rows (queries) summing to 1.

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

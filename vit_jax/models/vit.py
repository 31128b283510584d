"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) in flax.linen.

Module names, nesting, shapes and initialisers follow the official linen model
(google-research/vision_transformer, `vit_jax/models_vit.py`), so the same
parameters give the same logits and released checkpoints load by renaming keys
(`names`). The model is its layers (`layers`: patch embedding, position
embedding, attention, MLP, dropout and drop-path, the encoder block,
pooling, guidance projections) and the encoder (`encoder`); the options for
training on little data, each a field whose default is off, sit in the
layer they change.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import masked_autoencoder
from vit_jax.models import names
from vit_jax.models import remat_scan
from vit_jax.models import resnet
from vit_jax.models.encoder import Encoder
from vit_jax.models.layers import guidance
from vit_jax.models.layers import patch_embedding
from vit_jax.models.layers import pooling
from vit_jax.models.layers import position
from vit_jax.models.layers.attention import MultiHeadSelfAttention
from vit_jax.models.layers.encoder_block import BlockConfig

Dtype = Any

# What a ViT sows for its training objective alone: a DeiT student's two
# heads' logits, a guided ViT's projected block features, an MAE's
# predicted pixels and mask.
TRAINING_OUTPUTS = 'training_outputs'
# Each apply's own values, never appended to what a collection held.
_LATEST = dict(reduce_fn=lambda _, value: value, init_fn=lambda: None)


class VisionTransformer(nn.Module):
  """ViT: patch embedding, [CLS] token, Transformer encoder, classifier head.

  Returns float32 logits, (batch, num_classes), whatever its fields.
  Parameters stay in float32 whatever `dtype` is; `dtype` sets the
  computation (e.g. `jnp.bfloat16`); `pre_logits` and `head` compute in
  float32.

  With `resnet_stages` set, this is the paper's hybrid: the images first go
  through a ResNet stem (`resnet.resnet_stem`), whose modules sit at the top
  level of the parameters as in the official tree, and `patch_size` is the
  patch size on its feature map (1 for R50+ViT-B_16).

  `attention` picks how every block computes attention, with the same
  parameters (`layers.attention.MultiHeadSelfAttention`): 'auto' (default:
  cuDNN's fused kernel on an NVIDIA GPU in bfloat16 or float16, else
  'einsum'), 'einsum', 'dot_product_attention' or 'cudnn'; the fused two
  need `attention_dropout_rate=0` and `locality_attention=False`.

  Options for training on little data, all off by default, each in its
  layer: `posemb` 'sincos2d' (fixed, no parameters; hidden_size a multiple
  of 4) or 'none' (no position information; `layers.position`);
  `classifier='map'` (`MAPHead_0`, no [CLS]) or 'gap' (the mean;
  `layers.pooling`); `stochastic_depth_rate` (drop path, linearly up to this
  rate at the last block; needs the 'dropout' rng; `layers.dropout`);
  `shifted_patches` (in place of the `embedding` conv; patch_size >= 2, no
  ResNet stem; `layers.patch_embedding`); `locality_attention` (a learned
  `temperature` per head, the diagonal masked; attention 'einsum') and
  `mimetic_init` (the attention kernels initialised as Trockman & Kolter
  2023; both `layers.attention`); `distillation_token` (DeiT: a `dist` token
  after `cls` and its head `head_dist`; classifier 'token'; the model
  returns the average of the two heads, DeiT's prediction, and sows each
  into `TRAINING_OUTPUTS` for its loss); `guided_blocks` and
  `guidance_widths` (locality guidance's projections, `layers.guidance`,
  sown into `TRAINING_OUTPUTS`).

  Self-supervised pre-training: `mae_mask_ratio` > 0 makes the model a
  masked autoencoder in training (`masked_autoencoder`: the encoder sees
  only `1 - mae_mask_ratio` of each image's patches, a decoder of
  `mae_decoder_depth` blocks `mae_decoder_width` wide predicts their
  pixels into `TRAINING_OUTPUTS`, the head an online probe behind a
  stop-gradient; every patch in evaluation; needs the 'dropout' rng).

  For large models (`remat_scan`; the same function either way): `remat`
  is what each encoder block keeps for the backward pass, the rest being
  recomputed there: 'none' (everything, the default), 'full' (only its
  input: least memory, about a third more compute) or 'dots' (the outputs
  of its matmuls with weights, `dots_with_no_batch_dims_saveable`: not the
  attention maps). `scan=True` runs the blocks as one `nn.scan` over
  parameters stacked as `Transformer/encoderblock/...` with a leading layer
  axis (`formats.params.stack_blocks`), which compiles several times faster
  (no stochastic depth).
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
  attention: str = 'auto'
  posemb: str = 'learned'
  stochastic_depth_rate: float = 0.0
  shifted_patches: bool = False
  locality_attention: bool = False
  mimetic_init: bool = False
  distillation_token: bool = False
  guided_blocks: tuple[int, ...] = ()
  guidance_widths: tuple[int, ...] = ()
  mae_mask_ratio: float = 0.0
  mae_decoder_depth: int = 8
  mae_decoder_width: int = 512
  remat: str = 'none'
  scan: bool = False

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
    return ((names.CLASS_TOKEN,) if self.classifier == 'token' else ()) + (
        (names.DISTILLATION_TOKEN,) if self.distillation_token else ())

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
    # Every field is checked here, when the model is made, so that a bad
    # override fails before any data is read.
    if self.classifier not in pooling.CLASSIFIERS:
      raise ValueError(f'classifier={self.classifier!r}; use one of '
                       f'{pooling.CLASSIFIERS}.')
    if self.posemb not in position.POSEMBS:
      raise ValueError(f'posemb={self.posemb!r}; use one of '
                       f'{position.POSEMBS}.')
    for field in ('hidden_size', 'num_layers', 'num_heads', 'mlp_dim'):
      if getattr(self, field) < 1:
        raise ValueError(f'{field}={getattr(self, field)} must be positive.')
    for field in ('dropout_rate', 'attention_dropout_rate'):
      if not 0.0 <= getattr(self, field) < 1.0:
        raise ValueError(f'{field}={getattr(self, field)} must be in [0, 1): '
                         'it is the probability of zeroing an activation.')
    # The attention layer checks its own fields; made here once, unbound,
    # so that a bad one fails now.
    MultiHeadSelfAttention(self.num_heads, self.attention_dropout_rate,
                           attention=self.attention,
                           locality=self.locality_attention, parent=None)
    if self.hidden_size % self.num_heads:
      raise ValueError(f'hidden_size={self.hidden_size} is not divisible by '
                       f'num_heads={self.num_heads}.')
    if self.patch_size < 1:
      raise ValueError(f'patch_size={self.patch_size} must be positive.')
    if self.resnet_stages is not None:
      resnet.validate_stem(self.resnet_stages, self.resnet_width_factor)
    if self.posemb == 'sincos2d':
      position.check_sincos_width(self.hidden_size)
    if not 0.0 <= self.stochastic_depth_rate < 1.0:
      raise ValueError(
          f'stochastic_depth_rate={self.stochastic_depth_rate} must be in '
          '[0, 1): it is the probability of dropping the last block.')
    if self.shifted_patches:
      patch_embedding.check_shifted_patches(self.patch_size, self.resnet_stages)
    if self.distillation_token and self.classifier != 'token':
      raise ValueError(
          f'distillation_token=True needs classifier=\'token\' (DeiT reads the '
          f'[CLS] and distillation tokens), got classifier='
          f'{self.classifier!r}.')
    remat_scan.check(self.remat, self.scan, self.stochastic_depth_rate)
    guidance.check_guidance(self.guided_blocks, self.guidance_widths,
                              self.num_layers, self.scan)
    masked_autoencoder.check(
        self.mae_mask_ratio, self.mae_decoder_depth, self.mae_decoder_width,
        guided_blocks=self.guided_blocks,
        shifted_patches=self.shifted_patches,
        resnet_stages=self.resnet_stages, posemb=self.posemb)
    super().__post_init__()

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool) -> jax.Array:
    if images.ndim != 4:
      raise ValueError(f'Expected images of shape (batch, height, width, '
                       f'channels), got shape {images.shape}.')
    self.check_image_size(*images.shape[1:3])
    x = self._embed_patches(images)
    n, h, w, _ = x.shape
    x = self._with_prefix_tokens(jnp.reshape(x, (n, h * w, x.shape[-1])))
    kept = None
    if self.mae_mask_ratio and train:
      kept = masked_autoencoder.kept_patches(self.make_rng('dropout'), n,
                                             h * w, self.mae_mask_ratio)
    x, guided = self._encoder()(x, train=train, grid=(h, w), kept=kept)
    if self.mae_mask_ratio:
      predictions = masked_autoencoder.Decoder(
          self.mae_decoder_width, self.mae_decoder_depth,
          self.effective_patch_size**2 * images.shape[-1], self.attention,
          self.dtype, name=masked_autoencoder.DECODER)(x, kept, h * w)
      self.sow(TRAINING_OUTPUTS, 'mae_predictions', predictions, **_LATEST)
      self.sow(TRAINING_OUTPUTS, 'mae_mask',
               masked_autoencoder.masked(kept, n, h * w), **_LATEST)
      # The head is an online probe: the labels never reach the encoder.
      x = jax.lax.stop_gradient(x)
    if guided:
      maps = guidance.guidance_maps(guided, self.guidance_widths, (h, w),
                                    self.dtype)
      self.sow(TRAINING_OUTPUTS, 'guided_features', tuple(maps), **_LATEST)
    return self._classify(x)

  def _embed_patches(self, images: jax.Array) -> jax.Array:
    """(batch, rows, columns, hidden_size): the patches' embeddings, through
    the hybrid's ResNet stem first when it has one."""
    x = images
    if self.resnet_stages is not None:
      # The official hybrid's stem, its modules directly in this one's scope.
      x = resnet.resnet_stem(x, self.resnet_stages, self.resnet_width_factor,
                             self.dtype)
    return patch_embedding.embed_patches(
        x, self.patch_size, self.hidden_size, shifted=self.shifted_patches,
        dtype=self.dtype)

  def _encoder(self) -> Encoder:
    block = BlockConfig(
        mlp_dim=self.mlp_dim,
        num_heads=self.num_heads,
        dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        locality=self.locality_attention,
        mimetic_init=self.mimetic_init)
    return Encoder(
        num_layers=self.num_layers,
        block=block,
        posemb=self.posemb,
        stochastic_depth_rate=self.stochastic_depth_rate,
        remat=self.remat,
        scan=self.scan,
        guided_blocks=self.guided_blocks,
        name=names.ENCODER)

  def _with_prefix_tokens(self, x: jax.Array) -> jax.Array:
    """The [CLS] (and DeiT's distillation) token before the patches."""
    n, _, c = x.shape

    def token(name, init):
      value = self.param(name, init, (1, 1, c))
      return jnp.broadcast_to(value.astype(x.dtype), (n, 1, c))

    # Not zero like [CLS]: with a position embedding of zero ('sincos2d',
    # 'none') the distillation token would start out identical to it.
    inits = {names.CLASS_TOKEN: nn.initializers.zeros,
             names.DISTILLATION_TOKEN: nn.initializers.normal(stddev=0.02)}
    prefix = [token(name, inits[name]) for name in self.prefix_tokens]
    return jnp.concatenate(prefix + [x], axis=1) if prefix else x

  def _classify(self, x: jax.Array) -> jax.Array:
    """The logits of the encoded tokens: of the prefix token(s), their mean
    or the MAP head's; DeiT's two heads averaged, each sown."""
    features = pooling.pooled_features(
        x, self.classifier, prefix_tokens=len(self.prefix_tokens),
        num_heads=self.num_heads, mlp_dim=self.mlp_dim, dtype=self.dtype)

    if self.representation_size is not None:
      pre_logits = nn.Dense(self.representation_size, name=names.PRE_LOGITS)
      features = [nn.tanh(pre_logits(f)) for f in features]

    heads = names.HEADS[:len(features)]
    logits = [
        nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros,
                 bias_init=nn.initializers.constant(self.head_bias_init),
                 name=name)(f) for name, f in zip(heads, features)
    ]
    if len(logits) == 1:
      return logits[0]
    class_logits, distillation_logits = logits
    self.sow(TRAINING_OUTPUTS, 'class_logits', class_logits, **_LATEST)
    self.sow(TRAINING_OUTPUTS, 'distillation_logits', distillation_logits,
             **_LATEST)
    return (class_logits + distillation_logits) / 2


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
  blocks = state['intermediates'][names.ENCODER]

  def weights(block):
    return block[names.ATTENTION]['attention_weights'][0]

  if model.scan:  # sown inside the scan: one array, a leading layer axis
    stacked = weights(blocks[names.STACKED_BLOCK])
    return logits, [stacked[i] for i in range(model.num_layers)]
  return logits, [weights(blocks[names.block_name(i)])
                  for i in range(model.num_layers)]


def attention_weights(model: VisionTransformer, variables: Any,
                      images: jax.Array) -> list[jax.Array]:
  """Every layer's attention probabilities for `images`, in eval mode
  (`logits_and_attention`)."""
  return logits_and_attention(model, variables, images)[1]

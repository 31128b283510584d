"""The Vision Transformer in flax.linen: the official `models_vit.py`'s tree
(google-research/vision_transformer), so the same parameters and logits."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models import remat_scan
from vit_jax.models import resnet
from vit_jax.models.encoder import Encoder
from vit_jax.models.layers import patch_embedding
from vit_jax.models.layers import pooling
from vit_jax.models.layers import position
from vit_jax.models.layers.attention import MultiHeadSelfAttention
from vit_jax.models.layers.encoder_block import BlockConfig


class VisionTransformer(nn.Module):
  """ViT: patch embedding, [CLS] token, Transformer encoder, classifier head."""

  # `resnet_stages` makes the paper's hybrid, `distillation_token` DeiT's; the
  # others act in `layers` and `remat_scan`.
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
  dtype: Any = jnp.float32
  resnet_stages: tuple[int, ...] | None = None
  resnet_width_factor: int = 1
  attention: str = 'auto'
  posemb: str = 'learned'
  stochastic_depth_rate: float = 0.0
  shifted_patches: bool = False
  locality_attention: bool = False
  mimetic_init: bool = False
  distillation_token: bool = False
  remat: str = 'none'
  scan: bool = False

  @property
  def effective_patch_size(self) -> int:
    """Side in image pixels of each token's square (16 for R50+ViT-B_16)."""
    return (self.patch_size if self.resnet_stages is None else
            resnet.stem_stride(self.resnet_stages) * self.patch_size)

  @property
  def prefix_tokens(self) -> tuple[str, ...]:
    """The tokens before the patches, in order."""
    return ((names.CLASS_TOKEN,) if self.classifier == 'token' else
            ()) + ((names.DISTILLATION_TOKEN,) if self.distillation_token else
                   ())

  def check_image_size(self, height: int, width: int) -> None:
    """Raises ValueError unless the patches tile a height x width image."""
    if height % (size := self.effective_patch_size) or width % size:
      factor = f'the patch size {self.patch_size}'
      if self.resnet_stages is not None:
        factor = (f'{size}, the ResNet stem\'s stride '
                  f'{resnet.stem_stride(self.resnet_stages)} times {factor} on '
                  'its feature map')
      raise ValueError(f'Image size {height}x{width} is not divisible by '
                       f'{factor}: resize or crop the images to a multiple of '
                       f'{size}.')

  def __post_init__(self):
    # Checked when the model is made, so that a bad override fails before
    # any data is read.
    for field, choices in (('classifier', pooling.CLASSIFIERS),
                           ('posemb', position.POSEMBS)):
      if getattr(self, field) not in choices:
        raise ValueError(
            f'{field}={getattr(self, field)!r}; use one of {choices}.')
    for field in ('hidden_size', 'num_layers', 'num_heads', 'mlp_dim',
                  'patch_size'):
      if getattr(self, field) < 1:
        raise ValueError(f'{field}={getattr(self, field)} must be positive.')
    for field, what in (('dropout_rate', 'zeroing an activation'),
                        ('attention_dropout_rate', 'zeroing an activation'),
                        ('stochastic_depth_rate', 'dropping the last block')):
      if not 0.0 <= getattr(self, field) < 1.0:
        raise ValueError(f'{field}={getattr(self, field)} must be in [0, 1): '
                         f'it is the probability of {what}.')
    # The attention layer checks its own fields.
    MultiHeadSelfAttention(self.num_heads, self.attention_dropout_rate,
                           attention=self.attention,
                           locality=self.locality_attention, parent=None)
    if self.hidden_size % self.num_heads:
      raise ValueError(f'hidden_size={self.hidden_size} is not divisible by '
                       f'num_heads={self.num_heads}.')
    if self.resnet_stages is not None and self.resnet_width_factor < 1:
      raise ValueError(
          f'width_factor={self.resnet_width_factor} must be at least 1.')
    if any(n < 1 for n in self.resnet_stages or ()):
      raise ValueError(f'Every ResNet stage needs at least one unit, got '
                       f'stages={tuple(self.resnet_stages)}.')
    if self.posemb == 'sincos2d' and self.hidden_size % 4:
      raise ValueError(
          f"posemb='sincos2d' needs a hidden_size divisible by 4, got "
          f"{self.hidden_size}: use a multiple of 4 or posemb='learned'.")
    if self.shifted_patches and self.resnet_stages is not None:
      raise ValueError(
          'shifted_patches=True shifts image pixels and cannot follow a '
          'ResNet stem: set resnet_stages=None or shifted_patches=False.')
    if self.shifted_patches and self.patch_size < 2:
      raise ValueError('shifted_patches=True shifts by half a patch, which '
                       f'patch_size={self.patch_size} cannot give: use a '
                       'patch_size of at least 2.')
    if self.distillation_token and self.classifier != 'token':
      raise ValueError(f'distillation_token=True needs classifier=\'token\' '
                       f'(DeiT reads the [CLS] and distillation tokens), got '
                       f'classifier={self.classifier!r}.')
    remat_scan.check(self.remat, self.scan, self.stochastic_depth_rate)
    super().__post_init__()

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool,
               kept_patches: jax.Array | None = None, probe: bool = False,
               return_out: bool = False):
    """`kept_patches`: the patch tokens the encoder sees; `probe`: an MAE's."""
    # float32 logits (batch, num_classes), or `(logits, out)` with
    # `return_out`, as big_vision's.
    if images.ndim != 4:
      raise ValueError(f'Expected images of shape (batch, height, width, '
                       f'channels), got shape {images.shape}.')
    self.check_image_size(*images.shape[1:3])
    x = images
    if self.resnet_stages is not None:
      x = resnet.resnet_stem(x, self.resnet_stages, self.resnet_width_factor,
                             self.dtype)
    x = patch_embedding.embed_patches(x, self.patch_size, self.hidden_size,
                                      shifted=self.shifted_patches,
                                      dtype=self.dtype)
    n, h, w, _ = x.shape
    x = self._with_prefix_tokens(jnp.reshape(x, (n, h * w, x.shape[-1])))
    encoder = Encoder(num_layers=self.num_layers, block=BlockConfig.of(self),
                      posemb=self.posemb,
                      stochastic_depth_rate=self.stochastic_depth_rate,
                      remat=self.remat, scan=self.scan, name=names.ENCODER)
    x, blocks = encoder(x, train=train, grid=(h, w), kept=kept_patches)
    logits, out = self._classify(jax.lax.stop_gradient(x) if probe else x)
    out.update(encoded=x, blocks=blocks)
    return (logits, out) if return_out else logits

  def _with_prefix_tokens(self, x: jax.Array) -> jax.Array:
    """The [CLS] (and DeiT's distillation) token before the patches."""
    n, _, c = x.shape

    def token(name, init):
      value = self.param(name, init, (1, 1, c))
      return jnp.broadcast_to(value.astype(x.dtype), (n, 1, c))

    # Not zero like [CLS]: with a position embedding of zero ('sincos2d',
    # 'none') the distillation token would start out identical to it.
    inits = {
        names.CLASS_TOKEN: nn.initializers.zeros,
        names.DISTILLATION_TOKEN: nn.initializers.normal(stddev=0.02)
    }
    prefix = [token(name, inits[name]) for name in self.prefix_tokens]
    return jnp.concatenate(prefix + [x], axis=1) if prefix else x

  def _classify(self, x: jax.Array) -> tuple[jax.Array, dict]:
    """The logits of the encoded tokens; DeiT's two heads' mean."""
    features = pooling.pooled_features(x, self.classifier, prefix_tokens=len(
        self.prefix_tokens), num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                                       dtype=self.dtype)

    if self.representation_size is not None:
      pre_logits = nn.Dense(self.representation_size, name=names.PRE_LOGITS)
      features = [nn.tanh(pre_logits(f)) for f in features]

    logits = [
        nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros,
                 name=name)(f) for name, f in zip(names.HEADS, features)
    ]
    if len(logits) == 1:
      return logits[0], {}
    class_logits, distillation_logits = logits
    return (class_logits + distillation_logits) / 2, dict(
        class_logits=class_logits, distillation_logits=distillation_logits)


class ViTWrapper(nn.Module):
  """A model that trains `vit` with parameters of its own beside the ViT's."""

  vit: VisionTransformer

  def setup(self):
    nn.share_scope(self, self.vit)


def logits_and_attention(
    model: VisionTransformer, variables: Any,
    images: jax.Array) -> tuple[jax.Array, list[jax.Array]]:
  """The logits of `images` in eval mode, and every layer's attention."""
  if not isinstance(model, VisionTransformer):
    raise TypeError(f'{type(model).__name__} has no attention: pass a ViT.')
  logits, state = model.apply(variables, images, train=False,
                              mutable=['intermediates'])
  blocks = state['intermediates'][names.ENCODER]

  def weights(block):
    return block[names.ATTENTION]['attention_weights'][0]

  if model.scan:  # sown inside the scan: one array, a leading layer axis
    return logits, list(weights(blocks[names.STACKED_BLOCK]))
  return logits, [
      weights(blocks[names.block_name(i)]) for i in range(model.num_layers)
  ]


def attention_weights(model: VisionTransformer, variables: Any,
                      images: jax.Array) -> list[jax.Array]:
  """Every layer's attention probabilities for `images`, in eval mode."""
  return logits_and_attention(model, variables, images)[1]

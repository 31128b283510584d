"""The names in a ViT's parameter tree that code outside the model reads.

They are the official linen model's (google-research/vision_transformer,
`vit_jax/models_vit.py`), so released checkpoints load by renaming keys:
the model names these modules from here, and so do the formats and
analyses that read its parameters. Names no reader outside the model uses,
such as its LayerNorms', stay where the module is made; the conversion
tables to timm and transformers (`formats.timm`, `formats.hf`) spell whole
paths out, each row one key of each tree.
"""

# At the top level of the parameters.
PATCH_EMBEDDING = 'embedding'
# The tokens before the patches: [CLS], then DeiT's distillation token.
CLASS_TOKEN = 'cls'
DISTILLATION_TOKEN = 'dist'
PREFIX_TOKENS = (CLASS_TOKEN, DISTILLATION_TOKEN)
# Shifted patch tokenization's, in place of PATCH_EMBEDDING.
SHIFTED_PATCH_NORM = 'shifted_patch_norm'
SHIFTED_PATCH_EMBEDDING = 'shifted_patch_embedding'
ENCODER = 'Transformer'
MAP_HEAD = 'MAPHead_0'
# The representation layer before the heads (`representation_size`), the
# classifier, then DeiT's distillation head.
PRE_LOGITS = 'pre_logits'
HEADS = ('head', 'head_dist')
HEAD = HEADS[0]

# What only training reads, beside the ViT's own: an MAE's decoder, and
# locality guidance's projections (`locality_guidance_0`, ...).
MAE_DECODER = 'mae_decoder'
GUIDANCE_PROJECTION = 'locality_guidance'
TRAINING_ONLY = (MAE_DECODER, GUIDANCE_PROJECTION)

# Under ENCODER.
POSITION_EMBEDDING = 'posembed_input'
ENCODER_NORM = 'encoder_norm'
# The official tree's block i (`block_name`), and a scanned model's one
# block whose arrays have a leading layer axis, as big_vision names it.
BLOCK_PREFIX = 'encoderblock_'
STACKED_BLOCK = 'encoderblock'

# Under each block.
ATTENTION = 'MultiHeadDotProductAttention_0'
MLP = 'MlpBlock_0'

# Where the learned position embedding's table sits, and the final norm's
# scale, which every ViT has.
POSITION_EMBEDDING_TABLE = (ENCODER, POSITION_EMBEDDING, 'pos_embedding')
ENCODER_NORM_SCALE = (ENCODER, ENCODER_NORM, 'scale')


def block_name(layer: int) -> str:
  return f'{BLOCK_PREFIX}{layer}'


def training_only(name: str) -> bool:
  """Whether the top-level parameter `name` serves only training."""
  return name.startswith(TRAINING_ONLY)


def inference_params(params: dict) -> dict:
  """A trained run's `params` without what served only its training."""
  return {name: value for name, value in params.items()
          if not training_only(name)}


def path(keys: tuple[str, ...]) -> str:
  """`keys` as a flat key, 'Transformer/encoder_norm/scale'."""
  return '/'.join(keys)

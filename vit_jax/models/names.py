"""The names, the official linen model's, in a ViT's tree that others read."""

# At the top level of the parameters.
PATCH_EMBEDDING = 'embedding'
CLASS_TOKEN = 'cls'
DISTILLATION_TOKEN = 'dist'
PREFIX_TOKENS = (CLASS_TOKEN, DISTILLATION_TOKEN)
# Shifted patch tokenization's, in place of PATCH_EMBEDDING.
SHIFTED_PATCH_NORM = 'shifted_patch_norm'
SHIFTED_PATCH_EMBEDDING = 'shifted_patch_embedding'
ENCODER = 'Transformer'
MAP_HEAD = 'MAPHead_0'
PRE_LOGITS = 'pre_logits'
HEADS = ('head', 'head_dist')
HEAD = HEADS[0]

# What only training reads, beside the ViT's own.
MAE_DECODER = 'mae_decoder'
GUIDANCE_PROJECTION = 'locality_guidance'
TRAINING_ONLY = (MAE_DECODER, GUIDANCE_PROJECTION)

# Under ENCODER.
POSITION_EMBEDDING = 'posembed_input'
ENCODER_NORM = 'encoder_norm'
# A scanned model's one block has a leading layer axis, as in big_vision.
BLOCK_PREFIX = 'encoderblock_'
STACKED_BLOCK = 'encoderblock'

# Under each block.
ATTENTION = 'MultiHeadDotProductAttention_0'
MLP = 'MlpBlock_0'

POSITION_EMBEDDING_TABLE = (ENCODER, POSITION_EMBEDDING, 'pos_embedding')
ENCODER_NORM_SCALE = (ENCODER, ENCODER_NORM, 'scale')


def block_name(layer: int) -> str:
  return f'{BLOCK_PREFIX}{layer}'


def training_only(name: str) -> bool:
  """Whether the top-level parameter `name` serves only training."""
  return name.startswith(TRAINING_ONLY)


def inference_params(params: dict) -> dict:
  """A trained run's `params` without what served only its training."""
  return {k: v for k, v in params.items() if not training_only(k)}


def path(keys: tuple[str, ...]) -> str:
  """`keys` as a flat key, 'Transformer/encoder_norm/scale'."""
  return '/'.join(keys)

"""Models: the ViT family, its MAE wrapper and the small-data study's CNNs;
`registry` makes each by name or from a training config."""

from vit_jax.models.cnn import SimpleCNN
from vit_jax.models.cnn import SmallResNet
from vit_jax.models.registry import MODEL_NAMES
from vit_jax.models.registry import model_variables
from vit_jax.models.registry import create_model
from vit_jax.models.registry import default_fields
from vit_jax.models.registry import from_config
from vit_jax.models.registry import training_fields
from vit_jax.models.registry import VIT_FIELDS
from vit_jax.models.registry import vit_of_architecture
from vit_jax.models.vit import VisionTransformer
from vit_jax.models.vit import attention_weights
from vit_jax.models.vit import logits_and_attention

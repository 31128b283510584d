"""What of a trained model only its training reads (locality guidance's
projections, an MAE's decoder), and the model and parameters without it:
the ViT that is evaluated, analysed, exported and fine-tuned."""

from typing import Any

import flax.linen as nn

from vit_jax.models import masked_autoencoder
from vit_jax.models.layers import guidance

# What the names of those parameters start with, at the top level of a ViT's.
TRAINING_ONLY = (guidance.GUIDANCE_PROJECTION, masked_autoencoder.DECODER)


def training_only(name: str) -> bool:
  """Whether the top-level parameter `name` serves only training."""
  return name.startswith(TRAINING_ONLY)


def inference_params(params: Any) -> Any:
  """`params` without what serves only training."""
  return {name: value for name, value in params.items()
          if not training_only(name)}


def for_inference(model: nn.Module, variables: dict) -> tuple[nn.Module,
                                                               dict]:
  """The model and variables a trained run is evaluated, analysed, exported
  and fine-tuned with: a guided ViT without its guidance projections, an
  MAE without its decoder; any other model as it is."""
  if not (getattr(model, 'guided_blocks', ())
          or getattr(model, 'mae_mask_ratio', 0.0)):
    return model, variables
  return (model.clone(guided_blocks=(), guidance_widths=(),
                      mae_mask_ratio=0.0),
          {**variables, 'params': inference_params(variables['params'])})

"""What the train step minimises: soft-target cross-entropy, and the
objectives built on it.

Every label becomes a soft target once (`soft_targets`, optax's label
smoothing); mixup and CutMix mix those targets, and every objective is
`Objective`: a function of the model's logits, what it returns beside them
(`outputs`), the targets and the images, so a technique adds an objective,
not a branch in the step. `classification` is the base; each technique is
a function `base -> objective` around it (DeiT's in `distillation`, a CNN's
`locality_guidance`, `models.masked_autoencoder`'s reconstruction), all
chosen in `training.startup`.
"""

from typing import Protocol

import jax
import optax


def soft_targets(labels: jax.Array, num_classes: int,
                 label_smoothing: float = 0.0) -> jax.Array:
  """(batch, num_classes) one-hot targets, smoothed: off = smoothing / n,
  on = 1 - smoothing + off (as timm's mixup targets)."""
  return optax.smooth_labels(jax.nn.one_hot(labels, num_classes),
                             label_smoothing)


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """Per-example cross-entropy of soft `targets`."""
  return optax.softmax_cross_entropy(logits, targets)


class Objective(Protocol):
  """Per-example training loss. `outputs` is the model's `out` with
  `return_out=True` (a DeiT student's two heads' logits, a guided ViT's
  projected block features, an MAE's predicted pixels and mask); `images` are
  the model's inputs, augmented and mixed."""

  def __call__(self, logits: jax.Array, outputs: dict, targets: jax.Array,
               images: jax.Array) -> jax.Array:
    ...


def classification(logits: jax.Array, outputs: dict, targets: jax.Array,
                   images: jax.Array) -> jax.Array:
  """The model's logits against the targets."""
  del outputs, images
  return cross_entropy(logits, targets)

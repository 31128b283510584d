"""Soft-target cross-entropy, and `Objective`, which every technique wraps."""

from typing import Protocol

import jax
import optax


def soft_targets(labels: jax.Array, num_classes: int,
                 label_smoothing: float = 0.0) -> jax.Array:
  """(batch, num_classes) one-hot targets, smoothed as timm's mixup targets."""
  # off = smoothing / n, on = 1 - smoothing + off.
  return optax.smooth_labels(jax.nn.one_hot(labels, num_classes),
                             label_smoothing)


class Objective(Protocol):
  """Per-example training loss; `outputs` is the model's `out`."""

  def __call__(self, logits: jax.Array, outputs: dict, targets: jax.Array,
               images: jax.Array) -> jax.Array:
    ...


def classification(logits: jax.Array, outputs: dict, targets: jax.Array,
                   images: jax.Array) -> jax.Array:
  """The model's logits against the targets."""
  del outputs, images
  return optax.softmax_cross_entropy(logits, targets)

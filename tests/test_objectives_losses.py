"""Soft targets and the cross-entropy every objective is built on."""

import jax
import numpy as np
import optax

from vit_jax.objectives import losses


def test_soft_targets_smooth_as_timm_mixup_targets():
  targets = losses.soft_targets(np.array([2, 0]), 4, label_smoothing=0.2)
  off = 0.2 / 4
  np.testing.assert_allclose(targets, [[off, off, 1 - 0.2 + off, off],
                                       [1 - 0.2 + off, off, off, off]],
                             rtol=1e-6)
  np.testing.assert_allclose(targets.sum(-1), 1.0, rtol=1e-6)


def test_classification_is_the_cross_entropy_of_the_targets():
  logits = jax.random.normal(jax.random.key(0), (3, 5))
  targets = losses.soft_targets(np.array([1, 4, 0]), 5, 0.1)
  np.testing.assert_allclose(
      losses.classification(logits, {}, targets, images=None),
      optax.softmax_cross_entropy(logits, targets), rtol=1e-6)
  # Unsmoothed targets are one-hot: test_data_mixing's unmixed targets.

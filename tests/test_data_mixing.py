"""Mixup and CutMix of a batch and its soft targets, on the device."""

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.data import mixing
from vit_jax.objectives import losses

SHAPE = (8, 32, 32, 3)
LABELS = jnp.arange(8) % 10
IMAGES = jax.random.uniform(jax.random.key(0), SHAPE)


def soft_targets(label_smoothing=0.0):
  """The targets the train step mixes: one-hot labels, smoothed."""
  return losses.soft_targets(LABELS, 10, label_smoothing)


# The alphas and probabilities are traced: one program for every setting.
@jax.jit
def mix(key, images, mixup_alpha, cutmix_alpha, switch_probability=0.5,
        label_smoothing=0.0, probability=1.0):
  """`mixing.mix`'s images and targets, and the parameters it used."""
  return (*mixing.mix(key, images, soft_targets(label_smoothing), mixup_alpha,
                      cutmix_alpha, switch_probability, probability),
          mixing.mix_parameters(key, images.shape, mixup_alpha, cutmix_alpha,
                                switch_probability, probability))


def test_mixup_blends_the_batch_and_its_smoothed_targets_with_its_reverse():
  for seed in range(3):
    out, targets, (lam, use_cutmix, box) = mix(jax.random.key(seed), IMAGES,
                                               0.8, 0.0)
    assert not use_cutmix and not box.any() and 0 < lam < 1
    np.testing.assert_allclose(out, lam * IMAGES + (1 - lam) * IMAGES[::-1],
                               atol=1e-6)
    one_hot = np.eye(10)[LABELS]
    np.testing.assert_allclose(targets,
                               lam * one_hot + (1 - lam) * one_hot[::-1],
                               atol=1e-6)
    assert targets.dtype == jnp.float32 and targets.shape == (8, 10)
    np.testing.assert_allclose(targets.sum(1), 1.0, atol=1e-6)
  # Smoothed as timm's `mixup_target` (test_objectives_losses): off = s / n,
  # on = 1 - s + off.
  smooth = np.where(np.eye(10)[LABELS], 0.91, 0.01)
  _, targets, (lam, _, _) = mix(jax.random.key(2), IMAGES, 0.8, 0.0,
                                label_smoothing=0.1)
  np.testing.assert_allclose(targets, lam * smooth + (1 - lam) * smooth[::-1],
                             atol=1e-6)


def test_cutmix_pastes_a_box_and_weighs_labels_by_its_area():
  areas = set()
  for seed in range(4):
    out, targets, (lam, use_cutmix, box) = mix(jax.random.key(seed), IMAGES,
                                               0.0, 1.0)
    box = np.asarray(box)
    assert use_cutmix
    pasted = box[None, :, :, None]
    np.testing.assert_array_equal(out, np.where(pasted, IMAGES[::-1], IMAGES))
    fraction = box.mean()
    areas.add(fraction)
    np.testing.assert_allclose(lam, 1 - fraction, rtol=1e-6)
    own = np.asarray(targets)[np.arange(8), LABELS]
    np.testing.assert_allclose(own, 1 - fraction, rtol=1e-6)
    np.testing.assert_allclose(targets.sum(1), 1.0, atol=1e-6)
  assert len(areas) > 1
  # With both alphas, the switch probability picks CutMix or Mixup.
  for switch, expected in ((1.0, True), (0.0, False)):
    params = mix(jax.random.key(0), IMAGES, 1.0, 1.0, switch)[2]
    assert bool(params.use_cutmix) == expected
  assert set(
      bool(mix(jax.random.key(s), IMAGES, 1.0, 1.0)[2].use_cutmix)
      for s in range(20)) == {False, True}


def test_no_mixing_gives_the_images_and_targets_back():
  targets = soft_targets()
  out, mixed = mixing.mix(jax.random.key(1), IMAGES, targets, 0.0, 0.0)
  assert out is IMAGES and mixed is targets
  # Traced zeros take the compiled path: lam 1, the same result.
  for alphas, probability in (((1.0, 1.0), 0.0), ((0.0, 0.0), 1.0)):
    out, mixed, params = mix(jax.random.key(1), IMAGES, *alphas,
                             probability=probability)
    assert params.lam == 1 and not params.use_cutmix
    np.testing.assert_array_equal(out, IMAGES)
    np.testing.assert_array_equal(mixed, np.eye(10)[LABELS])

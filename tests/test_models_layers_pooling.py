"""Pooling: the MAP head against a [CLS] token."""

import jax

from vit_jax.models import VisionTransformer
from tests.test_models_vit import SMALL
from tests.test_models_vit import _flat
from tests.test_models_vit import _images
from tests.test_models_vit import official_param_shapes


def test_map_head_pools_with_a_probe_and_no_cls_token():
  model = VisionTransformer(num_classes=7, classifier='map', **SMALL)
  logits, variables = jax.eval_shape(lambda: model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False))
  assert logits.shape == (3, 7)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  # The official pooling model's tree (no [CLS], 16 positions), and a head
  # of a probe and an encoder block's attention, first LayerNorm and MLP.
  official = official_param_shapes(patch=4, hidden=32, layers=2, heads=4,
                                   mlp=64, tokens=16, num_classes=7,
                                   classifier='gap')
  block = 'Transformer/encoderblock_0/'
  head = {
      f'MAPHead_0/{k[len(block):]}': v for k, v in official.items()
      if k.startswith(block) and 'LayerNorm_1' not in k
  }
  assert shapes == {**official, **head, 'MAPHead_0/probe': (1, 1, 32)}

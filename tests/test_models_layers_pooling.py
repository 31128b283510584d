"""Pooling: the MAP head against a [CLS] token."""

from tests import helpers
from tests.test_models_vit import official_param_shapes


def test_map_head_pools_with_a_probe_and_no_cls_token():
  model = helpers.small_vit(7, classifier='map')
  logits, shapes = helpers.init_shapes(model, helpers.images(batch=3))
  assert logits.shape == (3, 7)
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

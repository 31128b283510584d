"""Pooling: the MAP head against a [CLS] token."""

import jax

from vit_jax.models import VisionTransformer
from tests.test_models_vit import SMALL
from tests.test_models_vit import _flat
from tests.test_models_vit import _images


def test_map_head_pools_with_a_probe_and_no_cls_token():
  model = VisionTransformer(num_classes=7, classifier='map', **SMALL)
  logits, variables = jax.eval_shape(lambda: model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False))
  assert logits.shape == (3, 7)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  assert 'cls' not in shapes
  assert shapes['Transformer/posembed_input/pos_embedding'] == (1, 16, 32)
  head = {
      k[len('MAPHead_0/'):]: v for k, v in shapes.items()
      if k.startswith('MAPHead_0/')
  }
  attention = 'MultiHeadDotProductAttention_0'
  assert head == {
      'probe': (1, 1, 32), **{
          f'{attention}/{p}/kernel': (32, 4, 8) for p in ('query', 'key', 'value')
      }, **{
          f'{attention}/{p}/bias': (4, 8) for p in ('query', 'key', 'value')
      }, f'{attention}/out/kernel': (4, 8, 32), f'{attention}/out/bias':
          (32,), 'LayerNorm_0/scale': (32,), 'LayerNorm_0/bias': (32,),
      'MlpBlock_0/Dense_0/kernel': (32, 64), 'MlpBlock_0/Dense_0/bias': (64,),
      'MlpBlock_0/Dense_1/kernel': (64, 32), 'MlpBlock_0/Dense_1/bias': (32,),
  }

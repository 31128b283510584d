"""Locality guidance's projections: only they are added, and their fields
are checked."""

import numpy as np
import pytest

from vit_jax.models import VisionTransformer
from vit_jax.models import for_inference
from vit_jax.models import vit
from tests.helpers import random_params
from tests.test_models_vit import SMALL
from tests.test_models_vit import _flat
from tests.test_models_vit import _images
from tests.test_models_vit import param_shapes


GUIDED = dict(num_classes=5, **{**SMALL, 'num_layers': 3},
              guided_blocks=(0, 2), guidance_widths=(6, 10))


def test_guidance_adds_only_its_projections_and_sows_the_blocks_maps():
  model = VisionTransformer(**GUIDED)
  images = _images()
  variables = {'params': random_params(model, images, train=False)}
  shapes = param_shapes(model, images)
  plain = param_shapes(VisionTransformer(**{**GUIDED, 'guided_blocks': (),
                                       'guidance_widths': ()}), images)
  hidden = SMALL['hidden_size']
  assert shapes == {**plain,
                    'locality_guidance_0/kernel': (hidden, 6),
                    'locality_guidance_0/bias': (6,),
                    'locality_guidance_1/kernel': (hidden, 10),
                    'locality_guidance_1/bias': (10,)}

  logits, state = model.apply(variables, images, train=False,
                              capture_intermediates=True,
                              mutable=[vit.TRAINING_OUTPUTS, 'intermediates'])
  maps = state[vit.TRAINING_OUTPUTS]['guided_features']
  blocks = state['intermediates']['Transformer']
  grid = images.shape[1] // SMALL['patch_size']
  for k, block in enumerate((0, 2)):
    tokens = blocks[f'encoderblock_{block}']['__call__'][0][:, 1:]  # no [CLS]
    projection = variables['params'][f'locality_guidance_{k}']
    expected = (tokens @ projection['kernel'] + projection['bias']).reshape(
        images.shape[0], grid, grid, -1)
    np.testing.assert_allclose(maps[k], expected, rtol=1e-5, atol=1e-6)

  # Without the projections (what evaluation, export and fine-tuning get)
  # the same logits.
  pure_model, pure = for_inference(model, variables)
  assert pure_model.guided_blocks == ()
  assert set(_flat(pure['params'])) == set(plain)
  np.testing.assert_array_equal(
      pure_model.apply(pure, images, train=False), logits)


@pytest.mark.parametrize('fields,message', [
    (dict(guided_blocks=(0, 2), guidance_widths=(6,)), 'same length'),
    (dict(guided_blocks=(2, 0), guidance_widths=(6, 6)), 'increasing order'),
    (dict(guided_blocks=(0, 3), guidance_widths=(6, 6)), r'each in 0\.\.2'),
    (dict(guided_blocks=(0,), guidance_widths=(0,)), 'must be positive'),
    (dict(scan=True), 'set scan=False'),
])
def test_guidance_fields_are_checked_in_one_line(fields, message):
  with pytest.raises(ValueError, match=message):
    VisionTransformer(**{**GUIDED, **fields})

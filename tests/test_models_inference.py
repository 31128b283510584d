import jax
import numpy as np

from vit_jax.models import SimpleCNN
from vit_jax.models import for_inference
from vit_jax.models import inference
from vit_jax.models import inference_params


def test_what_only_training_reads_is_named_by_its_top_level_key():
  params = {'head': 1, 'Transformer': 2, 'locality_guidance_0': 3,
            'locality_guidance_2': 4, 'mae_decoder': 5}
  assert inference_params(params) == {'head': 1, 'Transformer': 2}
  assert [inference.training_only(name) for name in params] == [
      False, False, True, True, True]


def test_a_model_without_such_parts_is_returned_as_it_is():
  model = SimpleCNN(num_classes=3, widths=(4, 4, 8, 8, 8))
  variables = model.init(jax.random.key(0), np.zeros((1, 8, 8, 3)),
                         train=False)
  assert for_inference(model, variables) == (model, variables)

"""Every registered model: exact parameter counts, one calling convention."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.formats import params as params_lib
from vit_jax.models import MODEL_NAMES
from vit_jax.models import create_model
from vit_jax.models import vit_of_architecture

# (image size, classes, parameters). The paper-sized counts are the official
# models' at 224x224 with 1000 classes; the small ones are the study's.
PARAMETER_COUNTS = {
    'ViT-Ti_16': (224, 1000, 5_717_416), 'ViT-S_16':
        (224, 1000, 22_050_664), 'ViT-S_32': (224, 1000, 22_878_952), 'ViT-B_8':
            (224, 1000, 86_576_872), 'ViT-B_16': (224, 1000, 86_567_656),
    'ViT-B_32': (224, 1000, 88_224_232), 'ViT-L_16': (224, 1000, 304_326_632),
    'ViT-L_32': (224, 1000, 306_535_400), 'ViT-H_14': (224, 1000, 632_045_800),
    'R50+ViT-B_16': (224, 1000, 98_659_112), 'ViT-Tiny-CIFAR_4':
        (32, 10, 1_205_898), 'SimpleCNN': (32, 10, 141_354), 'SmallResNet':
            (32, 10, 175_258),
}

STUDY_MODELS = ['ViT-Tiny-CIFAR_4', 'SimpleCNN', 'SmallResNet']


def test_every_registered_model_has_a_count():
  assert set(MODEL_NAMES) == set(PARAMETER_COUNTS)


@pytest.mark.parametrize('name', sorted(PARAMETER_COUNTS))
def test_exact_parameter_count(name):
  size, classes, expected = PARAMETER_COUNTS[name]
  # Shapes alone: the 632M-parameter ViT-H costs no memory.
  shapes = params_lib.param_shapes(create_model(name, classes), size)
  assert sum(a.size for a in jax.tree.leaves(shapes)) == expected


@pytest.mark.parametrize('name', STUDY_MODELS)
def test_models_are_called_the_same_way(name):
  # Shapes only (jax.eval_shape): the calls are traced, nothing compiled.
  model = create_model(name, 10)
  images = jnp.zeros((2, 32, 32, 3))
  variables = jax.eval_shape(
      lambda: model.init(jax.random.key(0), images, train=False))
  assert jax.eval_shape(lambda v: model.apply(v, images, train=False),
                        variables).shape == (2, 10)
  mutable = [c for c in variables if c != 'params']
  logits, _ = jax.eval_shape(
      lambda v: model.apply(v, images, train=True, mutable=mutable, rngs=
                            {'dropout': jax.random.key(1)}), variables)
  assert logits.shape == (2, 10)


def test_unknown_names_and_fields_list_the_known_ones():
  with pytest.raises(ValueError, match="Unknown model 'ViT-X_16'.*ViT-B_16"):
    create_model('ViT-X_16', 10)
  with pytest.raises(
      ValueError, match=r'ViT-Tiny-CIFAR_4 has no field\(s\) '
      r'num_layerz\. Did you mean num_layers\?'):
    create_model('ViT-Tiny-CIFAR_4', 10, num_layerz=1)


@pytest.mark.parametrize(
    'override, kind, default',
    [
        (dict(num_layers='abc'), 'an integer', '6'),  # as --config... =abc
        (dict(num_layers=6.0), 'an integer', '6'),
        (dict(num_layers=True), 'an integer', '6'),
        (dict(dropout_rate='0.2'), 'a number', '0.1'),  # the registry's
        (dict(mimetic_init=1), 'a boolean', 'False'),
        (dict(posemb=3), 'a string', "'learned'"),
    ])
def test_an_override_of_another_kind_is_one_line(override, kind, default):
  [(field, value)] = override.items()
  with pytest.raises(
      ValueError, match=re.escape(
          f"{field}={value!r}: ViT-Tiny-CIFAR_4's {field} is {kind} (default "
          f'{default}).')):
    create_model('ViT-Tiny-CIFAR_4', 10, **override)
  # An integer where a float is expected is a number; numpy's numbers are.
  assert create_model('ViT-Tiny-CIFAR_4', 10, dropout_rate=0).dropout_rate == 0
  create_model('ViT-Tiny-CIFAR_4', 10, num_layers=np.int64(2),
               dropout_rate=np.float32(0.1), mimetic_init=np.bool_(True))


@pytest.mark.parametrize('name',
                         [n for n in MODEL_NAMES if n not in STUDY_MODELS[1:]])
def test_every_registered_vit_is_named_from_its_parameter_shapes(name):
  model = create_model(name, 10)
  shapes = params_lib.param_shapes(model, 2 * model.effective_patch_size)
  assert vit_of_architecture(params_lib.vit_architecture(shapes)) == name

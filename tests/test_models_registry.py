"""Every registered model: exact parameter counts, one calling convention."""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.formats import params as params_lib
from vit_jax.models import MODEL_NAMES
from vit_jax.models import create_model
from vit_jax.models import vit_of_architecture

README = pathlib.Path(__file__).resolve().parents[1] / 'README.md'


def _readme_counts() -> dict[str, int]:
  """The parameter count of each model in the README's table of models."""
  table = README.read_text().split('\n| name |')[1].split('\n\n')[0]
  rows = [row.split('|') for row in table.splitlines()[2:]]
  return {
      name: int(count.replace(',', '')) for cells in rows for name, count in zip(
          re.findall('`([^`]+)`', cells[1]), cells[-2].split('/'))
  }


PARAMETER_COUNTS = _readme_counts()
STUDY_MODELS = ['ViT-Tiny-CIFAR_4', 'SimpleCNN', 'SmallResNet']


def test_every_registered_model_is_a_row_of_the_readme_with_its_count():
  assert set(MODEL_NAMES) == set(PARAMETER_COUNTS)


@pytest.mark.parametrize('name', sorted(PARAMETER_COUNTS))
def test_exact_parameter_count(name):
  # As the README states them: the paper's models at 224x224 with 1000
  # classes, the study's at 32x32 with 10.
  size, classes = (32, 10) if name in STUDY_MODELS else (224, 1000)
  # Shapes alone: the 632M-parameter ViT-H costs no memory.
  shapes = params_lib.param_shapes(create_model(name, classes), size)
  assert sum(a.size for a in jax.tree.leaves(shapes)) == PARAMETER_COUNTS[name]


@pytest.mark.parametrize('name', STUDY_MODELS)
def test_models_are_called_the_same_way(name):
  # Shapes only (jax.eval_shape): the calls are traced, nothing compiled.
  model, images = create_model(name, 10), jnp.zeros((2, 32, 32, 3))
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


# num_layers='abc' as --config.model_overrides.num_layers=abc gives it; the
# defaults are the registry's.
@pytest.mark.parametrize('override, kind, default',
                         [(dict(num_layers='abc'), 'an integer', '6'),
                          (dict(num_layers=6.0), 'an integer', '6'),
                          (dict(num_layers=True), 'an integer', '6'),
                          (dict(dropout_rate='0.2'), 'a number', '0.1'),
                          (dict(mimetic_init=1), 'a boolean', 'False'),
                          (dict(posemb=3), 'a string', "'learned'")])
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
               dropout_rate=np.float32(0.1), mimetic_init=np.bool_(True),
               scan=np.bool_(True), remat=np.str_('full'))


@pytest.mark.parametrize('name',
                         [n for n in MODEL_NAMES if n not in STUDY_MODELS[1:]])
def test_every_registered_vit_is_named_from_its_parameter_shapes(name):
  model = create_model(name, 10)
  shapes = params_lib.param_shapes(model, 2 * model.effective_patch_size)
  assert vit_of_architecture(params_lib.vit_architecture(shapes)) == name

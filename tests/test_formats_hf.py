"""formats.hf: transformers' ViT layout, in and out, exactly."""

import json

import jax
import pytest

from tests import helpers
from tests.test_formats_npz import assert_trees_identical
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.formats import hf
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file
from vit_jax.formats import vit_model

# The largest families' arrays take a second each: slow.
FAMILIES = [
    'ViT-S_32', 'ViT-Tiny-CIFAR_4',
    *(pytest.param(name, marks=pytest.mark.slow)
      for name in ('ViT-B_8', 'ViT-L_16', 'ViT-H_14'))
]


@pytest.mark.parametrize('name', FAMILIES)
def test_ours_to_hf_to_ours_is_exact(tmp_path, name):
  model, params = helpers.one_block_vit(name)
  hf.write(tmp_path, params, model, 2 * model.patch_size)
  assert_trees_identical(hf.read(tmp_path, None), params)
  assert_trees_identical(hf.read(tmp_path / 'model.safetensors', None), params)
  assert hf.pixels(tmp_path) == vit_model.RELEASED_PIXELS


def test_the_names_and_shapes_are_transformers():
  """transformers' models/vit/modeling_vit.py layout, ViT-Ti/16 at 32x32."""
  model = models.create_model('ViT-Ti_16', 7)
  state = jax.eval_shape(hf.to_state, params_lib.param_shapes(model, 32))
  expected = {
      'vit.embeddings.cls_token':
          (1, 1, 192), 'vit.embeddings.position_embeddings': (1, 5, 192),
      'vit.embeddings.patch_embeddings.projection.weight': (192, 3, 16, 16),
      'vit.embeddings.patch_embeddings.projection.bias':
          (192,), 'vit.layernorm.weight': (192,), 'vit.layernorm.bias':
              (192,), 'classifier.weight': (7, 192), 'classifier.bias': (7,),
  }
  dense = {'intermediate.dense': (768, 192), 'output.dense': (192, 768)}
  dense |= dict.fromkeys(('layernorm_before', 'layernorm_after'), (192,))
  dense |= dict.fromkeys(
      ('attention.attention.query', 'attention.attention.key',
       'attention.attention.value', 'attention.output.dense'), (192, 192))
  for i in range(12):
    for name, shape in dense.items():
      expected[f'vit.encoder.layer.{i}.{name}.weight'] = shape
      expected[f'vit.encoder.layer.{i}.{name}.bias'] = shape[:1]
  assert {key: value.shape for key, value in state.items()} == expected


def unprefixed(params):
  """`params` in the names of a ViTModel's state."""
  return {k.removeprefix('vit.'): v for k, v in hf.to_state(params).items()}


def test_a_vit_model_reads_its_pooler_as_pre_logits(tmp_path):
  """An in21k ViTModel: no `vit.` prefix nor classifier, a pooler."""
  _, params = helpers.one_block_vit('ViT-Tiny-CIFAR_4')
  path = tmp_path / 'model.safetensors'
  safetensors_file.write(path, unprefixed(params))
  assert_trees_identical(hf.read(path, None), params)
  _, params = helpers.one_block_vit('ViT-Tiny-CIFAR_4', representation_size=128)
  state = unprefixed(params)
  del state['classifier.weight'], state['classifier.bias']
  assert {'pooler.dense.weight', 'pooler.dense.bias'} <= set(state)
  safetensors_file.write(path, state)
  backbone = {key: value for key, value in params.items() if key != 'head'}
  assert_trees_identical(hf.read(tmp_path, None), backbone)
  with pytest.raises(
      CheckpointError, match=r'has no classification head '
      r'\(head/kernel\): a backbone alone cannot be evaluated '
      'or converted; fine-tune it with config.init_from'):
    reading.load(tmp_path)


def test_the_folder_builds_transformers_model_of_our_logits_and_pixels(
    tmp_path):
  model, params = helpers.one_block_vit('ViT-B_16')
  imagenet = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
  hf.write(tmp_path, params, model, 32, imagenet)
  config = json.loads((tmp_path / 'config.json').read_text())
  expected = dict(hidden_act='gelu_pytorch_tanh', layer_norm_eps=1e-6,
                  hidden_size=768, num_hidden_layers=1, num_attention_heads=12,
                  intermediate_size=3072, patch_size=16, image_size=32)
  assert {key: config[key] for key in expected} == expected
  assert len(config['id2label']) == 7
  written = json.loads((tmp_path / hf.PREPROCESSOR_CONFIG).read_text())
  assert written['size'] == {'height': 32, 'width': 32}
  assert hf.pixels(tmp_path) == imagenet
  # The weights alone state nothing: the released models' [-1, 1].
  assert hf.pixels(tmp_path / 'model.safetensors') == ((0.5,) * 3,) * 2
  # As ViTImageProcessor reads it: one number for every channel, its
  # defaults for what is left out, no normalization when told so.
  preprocessor = tmp_path / hf.PREPROCESSOR_CONFIG
  preprocessor.write_text('{"image_mean": 0.4}')
  assert hf.pixels(tmp_path) == ((0.4,) * 3, (0.5,) * 3)
  preprocessor.write_text('{"do_normalize": false, "image_mean": 0.4}')
  assert hf.pixels(tmp_path) == ((0.0,) * 3, (1.0,) * 3)
  for text, said in (
      ('{"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}',
       'each must be 3 finite numbers'),
      ('{"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0, 0.5]}',
       'the std positive'), ('[1, 2]', 'holds a list, not a JSON object'),
      ('{"image_mean": ', 'is not valid JSON'),
  ):
    preprocessor.write_text(text)
    with pytest.raises(CheckpointError, match=f'^{preprocessor} .*{said}'):
      reading.trained_pixels(tmp_path)


def test_a_config_that_contradicts_its_weights_is_named(tmp_path, caplog):
  """Heads that do not divide the width: one line; a width: a warning."""
  model, params = helpers.one_block_vit('ViT-Tiny-CIFAR_4')
  hf.write(tmp_path, params, model, 8)
  helpers.edit_json(tmp_path / 'config.json', num_attention_heads=3)
  with pytest.raises(
      CheckpointError, match='model.safetensors says '
      r'num_attention_heads=3, which does not divide the width '
      r'of its weights \(128\); fix num_attention_heads in'):
    hf.read(tmp_path, None)
  for heads in ('4', -4, True):  # no number of heads
    helpers.edit_json(tmp_path / 'config.json', num_attention_heads=heads)
    with pytest.raises(CheckpointError, match=f'={heads!r}, which is no num'):
      hf.read(tmp_path, None)
  helpers.edit_json(tmp_path / 'config.json', hidden_size=192,
                    num_attention_heads=model.num_heads)
  assert_trees_identical(hf.read(tmp_path, None), params)
  assert (f'{tmp_path / "model.safetensors"} says hidden_size=192, but its '
          'weights have hidden_size=128: the weights decide.') in caplog.text
  helpers.edit_json(tmp_path / 'config.json', image_size=[16, 4])  # 4x1 of 2x2
  with pytest.raises(CheckpointError, match='says its images are 16x4: only'):
    hf.read(tmp_path, None)

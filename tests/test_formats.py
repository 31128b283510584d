"""vit_jax.formats: what the folder formats share."""

import inspect
import re

import pytest

from vit_jax import formats
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.formats import vit_model


@pytest.mark.parametrize('kind', sorted(reading.FOLDER_FORMATS))
def test_each_folder_format_is_what_the_protocol_declares(kind):
  module = reading.FOLDER_FORMATS[kind]
  assert isinstance(module.NAME, str)
  for name, declared in vars(formats.FolderFormat).items():
    if inspect.isfunction(declared) and not name.startswith('_'):
      assert list(inspect.signature(getattr(module, name)).parameters) == list(
          inspect.signature(declared).parameters)[1:], f'{kind}.{name}'


@pytest.mark.parametrize('kind,fields,feature', [
    ('timm', dict(representation_size=5), 'pre-logits layer'),
    ('timm', dict(classifier='map'), 'MAP head'),
    ('timm', dict(posemb='sincos2d'), "position embedding 'sincos2d'"),
    ('timm', dict(hidden_size=704, mlp_dim=960), r'MLP of width 960 \(timm'),
    ('timm', dict(resnet_stages=(1, 2)),
     r'hybrid of ResNet stages \(1, 2\) and width factor 1 \(its factories '
     r'build stages \(3, 4, 9\), \(2, 2, 2, 2\), \(3, 4, 6, 3\) or none, of '
     r'width factor 1\)'), ('hf', dict(classifier='gap'), "'gap' head"),
    ('hf', dict(representation_size=5), 'pre-logits layer'),
    ('hf', dict(distillation_token=True), 'distillation token'),
    ('hf', dict(resnet_stages=()),
     r'ResNet stem of the hybrid \(--format=timm has it\)'),
])
def test_what_a_folder_format_cannot_hold_is_one_line(tmp_path, kind, fields,
                                                      feature):
  module = reading.FOLDER_FORMATS[kind]
  model = models.create_model('ViT-Tiny-CIFAR_4', 7, num_layers=1, **fields)
  with pytest.raises(
      CheckpointError, match=f'^{re.escape(module.NAME)} has no {feature}.*, '
      'which this ViT has: (convert it with --format=npz|keep its workdir)'):
    module.write(tmp_path, None, model, 8)  # refused before the parameters
  assert not list(tmp_path.iterdir())


def test_an_npz_refuses_only_what_no_reader_could_rebuild():
  model = models.create_model('ViT-Tiny-CIFAR_4', 7, distillation_token=True,
                              representation_size=5)
  vit_model.check_exportable(model, 'npz', vit_model.npz_lacks(model))
  with pytest.raises(
      CheckpointError, match="^npz has no position embedding 'sincos2d', "
      'which this ViT has: keep its workdir, which every command reads.$'):
    sincos = model.clone(posemb='sincos2d')
    vit_model.check_exportable(sincos, 'npz', vit_model.npz_lacks(sincos))

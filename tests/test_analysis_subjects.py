"""What is analyzed: a released ViT, images, predictions, embeddings."""

import jax
import numpy as np
import pytest

from tests.helpers import png
from tests.helpers import random_vit_params
from vit_jax import config_schema
from vit_jax import models
from vit_jax.analysis import subjects
from vit_jax.checkpoints import export
from vit_jax.errors import AnalysisError
from vit_jax.errors import CheckpointError
from vit_jax.formats import npz


def test_a_runs_test_images_of_an_image_folder_come_from_every_class(tmp_path):
  for split in ('train', 'test'):
    for label, name in enumerate(('cat', 'dog', 'fox')):
      (tmp_path / split / name).mkdir(parents=True)
      for i in range(4):
        (tmp_path / split / name / f'{i}.png').write_bytes(
            png(np.full((8, 8, 3), 100 * label, np.uint8)))
  config = config_schema.defaults()
  config.update(dataset='image_folder', data_dir=str(tmp_path), image_size=8)
  images = subjects.run_test_images(config, 6)
  assert images.shape == (6, 8, 8, 3)
  np.testing.assert_array_equal(sorted(images[:, 0, 0, 0]),
                                [0, 0, 100, 100, 200, 200])


def test_image_files_are_the_named_ones_then_each_directorys_sorted(tmp_path):
  """Else one clear error."""
  for name in ('b.PNG', 'a.jpg', 'notes.txt', 'deeper/c.jpeg', 'text/a.txt'):
    (tmp_path / 'photos' / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / 'photos' / name).write_bytes(b'')
  (tmp_path / 'one.png').write_bytes(b'')
  found = subjects.image_files([
      str(tmp_path / 'one.png'),
      str(tmp_path / 'photos')
  ])
  assert [p.relative_to(tmp_path).as_posix() for p in found] == [
      'one.png', 'photos/a.jpg', 'photos/b.PNG', 'photos/deeper/c.jpeg'
  ]
  with pytest.raises(AnalysisError,
                     match=r'holds no \.jpg, \.jpeg or \.png file'):
    subjects.image_files([str(tmp_path / 'photos' / 'text')])
  with pytest.raises(AnalysisError, match='does not exist'):
    subjects.image_files([str(tmp_path / 'missing')])
  # top5 names the likeliest classes first.
  logits = np.log(np.array([[0.1, 0.6, 0.3]]))
  assert subjects.top5(logits, ['cat', 'dog', 'bird']) == [[['dog', 0.6],
                                                            ['bird', 0.3],
                                                            ['cat', 0.1]]]
  assert [c for c, _ in subjects.top5(logits, None)[0]] == [1, 2, 0]


@pytest.fixture(name='released', scope='module')
def _released(tmp_path_factory):
  """A ViT-Tiny-CIFAR_4 .npz in the official layout, of 3 classes."""
  path = tmp_path_factory.mktemp('released') / 'vit.npz'
  npz.save_npz(
      random_vit_params(models.create_model('ViT-Tiny-CIFAR_4', 3), 32), path)
  return path


def test_a_released_npz_is_analysed_at_its_position_embeddings_size(
    released, tmp_path):
  subject, config = subjects.load(None, released, None, None)
  assert config is None
  assert subject.image_size == 32 and subject.patch_size == 4
  assert subject.grid == (8, 8)
  assert subject.described == {
      'checkpoint': str(released), 'format': 'npz', 'model': 'ViT-Tiny-CIFAR_4'
  }
  # Scaled to [-1, 1] as the released models expect; shown in [0, 1].
  inputs, display = subjects.model_inputs(
      np.full((1, 16, 16, 3), 255, np.uint8), subject)
  assert inputs.shape == (1, 32, 32, 3)
  np.testing.assert_allclose(inputs, 1.0)
  np.testing.assert_allclose(display, 1.0)
  (tmp_path / 'classes.txt').write_text('cat\ndog\n')
  with pytest.raises(AnalysisError, match='has 2 lines; the model has 3'):
    subjects.read_class_names(tmp_path / 'classes.txt', subject)
  with pytest.raises(CheckpointError, match='--model=SimpleCNN is not a ViT'):
    subjects.load(None, released, 'SimpleCNN', None)
  # The same from timm's and transformers' folders of it.
  for format_name in ('timm', 'hf'):
    export.convert(released, tmp_path / format_name, format_name)
    converted, _ = subjects.load(None, tmp_path / format_name, None, None)
    assert converted.image_size == 32 and converted.grid == (8, 8)
    assert converted.described['format'] == format_name
    assert converted.model.num_heads == 4  # from the folder's config.json
    jax.tree.map(np.testing.assert_array_equal, converted.params,
                 subject.params)


def test_the_position_table_and_filters_are_whatever_the_model_has():
  model = models.create_model('ViT-Tiny-CIFAR_4', 3)
  params = {'Transformer': {'posembed_input': {'pos_embedding': 'learned'}}}
  assert subjects.position_table(model, params, (8, 8)) == 'learned'
  fixed = subjects.position_table(model.clone(posemb='sincos2d'), params,
                                  (8, 8))
  assert fixed.shape == (1, 64, 128)
  assert subjects.position_table(model.clone(posemb='none'), params,
                                 (8, 8)) is None
  hybrid = models.create_model('R50+ViT-B_16', 3)
  kernel, why = subjects.embedding_filters(hybrid, {})
  assert kernel is None and 'ResNet features' in why
  assert subjects.embedding_filters(model, {'embedding':
      {'kernel': 'filters'}}) == ('filters', 'the patch-embedding filters')

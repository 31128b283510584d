"""What is analyzed: a run's images or yours, predictions, embeddings."""

import numpy as np
import pytest

from tests import helpers
from vit_jax import models
from vit_jax.analysis import subjects
from vit_jax.errors import AnalysisError


def test_a_runs_test_images_of_an_image_folder_come_from_every_class(tmp_path):
  helpers.write_image_folder(
      tmp_path, {'train': 4, 'test': 4}, ('cat', 'dog', 'fox'),
      lambda _, i, label: np.full((8, 8, 3), 100 * label, np.uint8))
  config = helpers.schema_config(dataset='image_folder', data_dir=str(tmp_path),
                                 image_size=8)
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
  found = subjects.image_files([f'{tmp_path}/one.png', f'{tmp_path}/photos'])
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
  assert subjects.top5(logits, ['cat', 'dog', 'bird']) == [
      [['dog', 0.6], ['bird', 0.3], ['cat', 0.1]]
  ] and [c for c, _ in subjects.top5(logits, None)[0]] == [1, 2, 0]


def test_the_position_table_and_filters_are_whatever_the_model_has():
  model = models.create_model('ViT-Tiny-CIFAR_4', 3)
  params = {'Transformer': {'posembed_input': {'pos_embedding': 'learned'}}}
  assert subjects.position_table(model, params, (8, 8)) == 'learned'
  assert subjects.position_table(model.clone(posemb='sincos2d'), params,
                                 (8, 8)).shape == (1, 64, 128)
  assert subjects.position_table(model.clone(posemb='none'), params,
                                 (8, 8)) is None
  hybrid = models.create_model('R50+ViT-B_16', 3)
  kernel, why = subjects.embedding_filters(hybrid, {})
  assert kernel is None and 'ResNet features' in why
  assert subjects.embedding_filters(model, {'embedding':
      {'kernel': 'filters'}}) == ('filters', 'the patch-embedding filters')

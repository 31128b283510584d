"""The analyses on inputs of known answers, by `vit_jax.analysis`'s names."""

import inspect

import numpy as np
import pytest

from tests import helpers
from vit_jax import analysis
from vit_jax.analysis import measures
from vit_jax.models.layers import patch_embedding

GRID = (4, 4)
PATCH = 8
TOKENS = 1 + GRID[0] * GRID[1]


def neighbour_attention(cls_weight: float = 0.0) -> np.ndarray:
  """Each patch attends to its right neighbour; `cls_weight` to [CLS]."""
  attention = np.zeros((TOKENS, TOKENS))
  attention[0, 0] = 1.0
  for row in range(GRID[0]):
    for col in range(GRID[1]):
      target = col + 1 if col + 1 < GRID[1] else col - 1
      query, key = 1 + row * GRID[1] + col, 1 + row * GRID[1] + target
      attention[query, 0] = cls_weight
      attention[query, key] = 1.0 - cls_weight
  return attention


def with_distillation_token(attention: np.ndarray,
                            dist_weight: float = 0.0) -> np.ndarray:
  """`attention` with a dist token after [CLS], given `dist_weight`."""
  out = np.insert(np.insert(attention, 1, 0, axis=0), 1, 0, axis=1)
  out[2:, 2:] *= 1 - dist_weight
  out[2:, 1] = dist_weight * (1 - out[2:, 0])  # rows still sum to 1
  out[1, 1] = 1.0
  return out


def test_attention_distance_of_one_hot_and_uniform_attention():
  heads = np.stack([
      neighbour_attention(),
      neighbour_attention(cls_weight=0.5),  # the class token does not count
      np.eye(TOKENS),  # every patch attends to itself
  ])
  distances = measures.mean_attention_distance(heads[None], GRID, PATCH)
  np.testing.assert_allclose(distances, [PATCH, PATCH, 0.0], atol=1e-12)
  # With a distillation token, and a zero diagonal as locality attention's.
  heads = np.stack([
      with_distillation_token(neighbour_attention()),
      with_distillation_token(neighbour_attention(cls_weight=0.5), 0.5),
  ])
  distances = measures.mean_attention_distance(heads[None], GRID, PATCH,
                                               prefix=2)
  np.testing.assert_allclose(distances, [PATCH, PATCH], atol=1e-12)
  with pytest.raises(ValueError, match='not 1 prefix token'):
    measures.mean_attention_distance(heads[None], GRID, PATCH, prefix=1)
  with pytest.raises(ValueError, match='cannot hold a 4x4 patch grid'):
    measures.mean_attention_distance(np.ones((1, 1, 5, 5)), GRID, PATCH)
  # Uniform attention: the mean pairwise distance.
  uniform = np.full((1, 1, TOKENS, TOKENS), 1.0 / TOKENS)
  centres = measures.patch_centres(GRID, PATCH)
  pairwise = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
  np.testing.assert_allclose(
      measures.mean_attention_distance(uniform, GRID, PATCH), [pairwise.mean()])
  assert measures.uniform_attention_distance(GRID, PATCH) == pytest.approx(
      pairwise.mean())
  # Without the patch itself.
  others = pairwise[~np.eye(len(centres), dtype=bool)]
  assert measures.uniform_attention_distance(
      GRID, PATCH, exclude_self=True) == pytest.approx(others.mean())
  attention = np.zeros((1, 1, TOKENS, TOKENS))
  attention[0, 0, 0, 0] = 1
  attention[0, 0, 1:, 1:] = (1 - np.eye(TOKENS - 1)) / (TOKENS - 2)
  np.testing.assert_allclose(
      measures.mean_attention_distance(attention, GRID, PATCH), [others.mean()])
  # In pixels, row-major.
  np.testing.assert_array_equal(measures.patch_centres(
      (2, 3), 4), [[2, 2], [2, 6], [2, 10], [6, 2], [6, 6], [6, 10]])


def test_hand_built_2d_embedding_gives_2d_similarity_structure():
  """Each position embedded by its closeness to every grid position."""
  grid = (5, 5)
  centres = measures.patch_centres(grid, 1)
  table = np.exp(-((centres[:, None] - centres[None])**2).sum(-1) / 1.28)
  with_cls = np.concatenate([np.full((1, table.shape[1]), 7.0), table])[None]
  similarity = measures.position_embedding_similarity(with_cls, grid)
  assert similarity.shape == (*grid, *grid)
  np.testing.assert_allclose(np.einsum('ijij->ij', similarity), 1.0)
  np.testing.assert_allclose(similarity, similarity.transpose(2, 3, 0, 1))
  centre = measures.similarity_to_centre(similarity)
  assert centre.argmax() == 12  # the centre itself
  # Falls off with grid distance from the centre, the same in every direction.
  assert centre[2, 2] > centre[2, 3] > centre[2, 4]
  assert centre[3, 2] == pytest.approx(centre[2, 3]) == centre[2, 1]
  assert measures.similarity_distance_correlation(similarity) < -0.8
  random = np.random.default_rng(0).normal(size=(64, 256))
  similarity = measures.position_embedding_similarity(random, (8, 8))
  assert abs(measures.similarity_distance_correlation(similarity)) < 0.1
  with pytest.raises(ValueError, match='cannot cover a 4x4 patch grid'):
    measures.position_embedding_similarity(np.ones((5, 3)), GRID)


def test_principal_components_recover_the_filters_directions():
  rng = np.random.default_rng(0)
  shape = (2, 2, 3)
  basis = np.linalg.qr(rng.normal(size=(12, 2)))[0].T  # two unit directions
  weights = rng.normal(size=(500, 2)) * [3.0, 1.0]
  kernel = (weights @ basis).T.reshape(*shape, 500)
  components, explained = measures.patch_embedding_components(kernel, 3)
  assert components.shape == (3, *shape)
  for component, direction in zip(components[:2], basis):
    assert abs(component.ravel() @ direction) == pytest.approx(1.0, abs=1e-4)
  assert explained[0] > explained[1] > 0.05
  assert explained[:2].sum() == pytest.approx(1.0)
  assert explained[2] == pytest.approx(0.0, abs=1e-12)
  # Signed so the largest-magnitude entry is positive.
  assert components[0].ravel()[np.abs(components[0]).argmax()] > 0


def test_cls_attention_and_rollout_over_the_patch_grid():
  """With a distillation token too, the maps are over the patches only."""
  equal, close = np.testing.assert_array_equal, np.testing.assert_allclose
  attention = np.random.default_rng(0).random((2, 3, TOKENS, TOKENS))
  maps = measures.cls_attention(attention, GRID)
  assert maps.shape == (2, 3, *GRID)
  equal(maps[1, 2, 1, 3], attention[1, 2, 0, 1 + 1 * GRID[1] + 3])
  attention = np.random.default_rng(0).random((2, 3, TOKENS + 1, TOKENS + 1))
  cls_maps = measures.cls_attention(attention, GRID, prefix=2)
  dist_maps = measures.cls_attention(attention, GRID, prefix=2, query=1)
  assert cls_maps.shape == dist_maps.shape == (2, 3, *GRID)
  equal(cls_maps[1, 2, 1, 3], attention[1, 2, 0, 2 + 1 * GRID[1] + 3])
  equal(dist_maps[1, 2, 1, 3], attention[1, 2, 1, 2 + 1 * GRID[1] + 3])
  rollout = measures.attention_rollout([attention])
  equal(
      measures.cls_attention(rollout, GRID, prefix=2)[0],
      rollout[0, 0, 2:].reshape(GRID))
  with pytest.raises(ValueError, match='not 1 prefix token'):
    measures.cls_attention(attention, GRID)  # the old [CLS]-only slicing
  with pytest.raises(ValueError, match='not one of the 2 prefix'):
    measures.cls_attention(attention, GRID, prefix=2, query=2)
  # Rollout adds the residual, renormalizes and multiplies the layers.
  identity = np.broadcast_to(np.eye(TOKENS), (2, 3, TOKENS, TOKENS))
  rollout = measures.attention_rollout([identity] * 4)
  close(rollout, np.broadcast_to(np.eye(TOKENS), (2, TOKENS, TOKENS)))
  # Every token attends only to the class token.
  to_cls = np.broadcast_to([1.0, 0.0, 0.0], (1, 1, 3, 3))
  one_layer = 0.5 * (to_cls[0, 0] + np.eye(3))
  close(measures.attention_rollout([to_cls])[0], one_layer)
  close(measures.attention_rollout([to_cls, to_cls])[0], one_layer @ one_layer)
  # Heads are averaged before the residual is added.
  two_heads = np.stack([to_cls[0, 0], np.eye(3)])[None]
  close(measures.attention_rollout([two_heads])[0], (one_layer + np.eye(3)) / 2)


def test_shifted_patch_filters_are_the_unshifted_copys_slice():
  """The kernel rows of each patch's own pixels, times the norm's scale."""
  p, channels, width = 4, 3, 6
  rng = np.random.default_rng(0)
  images = rng.normal(size=(2, 8, 8, channels)).astype(np.float32)
  tokens = np.asarray(patch_embedding.shifted_patch_tokens(images, p))
  patches = images.reshape(2, 2, p, 2, p, channels).transpose(0, 1, 3, 2, 4, 5)
  np.testing.assert_array_equal(
      tokens.reshape(2, 2, 2, p, p, 5, channels)[..., 0, :], patches)
  kernel = rng.normal(size=(p * p * 5 * channels, width))
  scale = rng.normal(size=(p * p * 5 * channels,))
  filters = measures.shifted_patch_filters(kernel, p, scale)
  assert filters.shape == (p, p, channels, width)
  # The unshifted pixels' part of the projection of the LayerNorm'd tokens.
  unshifted = np.zeros_like(tokens)
  unshifted.reshape(2, 2, 2, p, p, 5, channels)[..., 0, :] = patches
  np.testing.assert_allclose(np.einsum('nhwabc,abcd->nhwd', patches, filters),
                             (unshifted * scale) @ kernel, rtol=1e-6, atol=1e-9)
  np.testing.assert_array_equal(
      measures.shifted_patch_filters(kernel, p)[1, 2, 0],
      kernel[(1 * p + 2) * 5 * channels])
  with pytest.raises(ValueError, match='not over 3x3 patches of 5 copies'):
    measures.shifted_patch_filters(kernel, 3)


def test_every_measure_is_the_packages_own_name_imported_alone():
  """Importing the measures loads neither matplotlib nor jax."""
  public = set(
      name
      for name, function in inspect.getmembers(measures, inspect.isfunction)
      if function.__module__ == measures.__name__ and not name.startswith('_'))
  assert public == set(analysis.__all__) and all(
      getattr(analysis, name) is getattr(measures, name) for name in public)
  assert helpers.run_python(
      '-c', 'import sys; from vit_jax import analysis; '
      "print(sorted({'jax', 'matplotlib'} & set(sys.modules)))",
      status=0).stdout.strip() == '[]'

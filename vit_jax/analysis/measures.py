"""The paper's analyses (Figures 6 and 7) in NumPy, of one layer's attention:
(batch, heads, tokens, tokens), the `prefix` tokens, then the patches."""

import numpy as np

__all__ = [
    'attention_rollout', 'cls_attention', 'cosine_similarity_matrix',
    'mean_attention_distance', 'patch_centres', 'patch_embedding_components',
    'position_embedding_similarity', 'shifted_patch_filters',
    'similarity_distance_correlation', 'similarity_to_centre',
    'uniform_attention_distance',
]


def cls_attention(attention: np.ndarray, grid: tuple[int, int], prefix: int = 1,
                  query: int = 0) -> np.ndarray:
  """Row `query` of (..., tokens, tokens) attention (or rollout) as grids."""
  matrix = np.asarray(attention)
  if (tokens := matrix.shape[-1]) != prefix + grid[0] * grid[1]:
    raise ValueError(f'{tokens} tokens are not {prefix} prefix token(s) and '
                     f'a {grid[0]}x{grid[1]} patch grid.')
  if not 0 <= query < prefix:
    raise ValueError(f'Token {query} is not one of the {prefix} prefix '
                     'token(s).')
  return matrix[..., query, prefix:].reshape(*matrix.shape[:-2], *grid)


def attention_rollout(attentions: list[np.ndarray]) -> np.ndarray:
  """Attention rollout (Abnar & Zuidema 2020), the paper's Figure 6."""
  rollout = None
  for attention in attentions:
    mixed = np.asarray(attention, np.float64).mean(axis=1)
    mixed = mixed + np.eye(mixed.shape[-1])
    mixed /= mixed.sum(axis=-1, keepdims=True)
    rollout = mixed if rollout is None else mixed @ rollout
  return rollout


def patch_centres(grid: tuple[int, int], patch_size: int) -> np.ndarray:
  """(h*w, 2) pixel coordinates (row, column) of the patch centres."""
  return (np.indices(grid).reshape(2, -1).T + 0.5) * patch_size


def _patch_distances(grid: tuple[int, int], patch_size: int) -> np.ndarray:
  centres = patch_centres(grid, patch_size)
  return np.linalg.norm(centres[:, None] - centres[None], axis=-1)


def mean_attention_distance(attention: np.ndarray, grid: tuple[int, int],
                            patch_size: int,
                            prefix: int | None = None) -> np.ndarray:
  """Mean attention distance in pixels of each head (the paper's Figure 7)."""
  attention = np.asarray(attention, np.float64)
  num_patches, tokens = grid[0] * grid[1], attention.shape[-1]
  if tokens < num_patches:
    raise ValueError(f'{tokens} tokens cannot hold a '
                     f'{grid[0]}x{grid[1]} patch grid.')
  if prefix is not None and tokens != prefix + num_patches:
    raise ValueError(f'{tokens} tokens are not {prefix} prefix token(s) and '
                     f'a {grid[0]}x{grid[1]} patch grid.')
  prefix = tokens - num_patches
  patches = attention[:, :, prefix:, prefix:]
  patches = patches / patches.sum(axis=-1, keepdims=True)
  distances = _patch_distances(grid, patch_size)
  return (patches * distances).sum(axis=-1).mean(axis=(0, 2))


def uniform_attention_distance(grid: tuple[int, int], patch_size: int,
                               exclude_self: bool = False) -> float:
  """The mean attention distance of a head attending to all patches alike."""
  distances = _patch_distances(grid, patch_size)
  n = len(distances)
  return float(distances.sum() / max(n * (n - 1 if exclude_self else n), 1))


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
  """(n, d) -> (n, n) cosine similarities."""
  vectors = np.asarray(vectors, np.float64)
  unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
  return unit @ unit.T


def position_embedding_similarity(position_embeddings: np.ndarray,
                                  grid: tuple[int, int]) -> np.ndarray:
  """(h, w, h, w) cosine similarity of the patch positions' embeddings."""
  table = np.asarray(position_embeddings).reshape(-1,
                                                  position_embeddings.shape[-1])
  if len(table) < (num_patches := grid[0] * grid[1]):
    raise ValueError(f'{len(table)} position embeddings cannot cover a '
                     f'{grid[0]}x{grid[1]} patch grid.')
  table = table[len(table) - num_patches:]
  return cosine_similarity_matrix(table).reshape(*grid, *grid)


def similarity_to_centre(similarity: np.ndarray) -> np.ndarray:
  """The (h, w) similarity map of the centre patch (rounding down)."""
  h, w = similarity.shape[:2]
  return similarity[h // 2, w // 2]


def similarity_distance_correlation(similarity: np.ndarray) -> float:
  """Pearson correlation of two positions' similarity with their distance."""
  h, w = similarity.shape[:2]
  distances, pairs = _patch_distances((h, w), 1), ~np.eye(h * w, dtype=bool)
  similarity = similarity.reshape(h * w, h * w)[pairs]
  return float(np.corrcoef(similarity, distances[pairs])[0, 1])


def patch_embedding_components(kernel: np.ndarray,
                               count: int) -> tuple[np.ndarray, np.ndarray]:
  """The top `count` principal components of the patch-embedding filters."""
  kernel = np.asarray(kernel, np.float64)
  filters = kernel.reshape(-1, kernel.shape[-1]).T  # (d, p*p*channels)
  filters = filters - filters.mean(axis=0)
  _, singular_values, components = np.linalg.svd(filters, full_matrices=False)
  count = min(count, len(components))
  components = components[:count]
  peaks = components[np.arange(count), np.abs(components).argmax(axis=1)]
  components = components * np.sign(peaks)[:, None]
  variance = singular_values**2
  return (components.reshape(count, *kernel.shape[:-1]),
          variance[:count] / variance.sum())


def shifted_patch_filters(kernel: np.ndarray, patch_size: int,
                          norm_scale: np.ndarray | None = None) -> np.ndarray:
  """The (p, p, channels, d) kernel shifted patch tokenization applies."""
  kernel = np.asarray(kernel, np.float64)
  features, width = kernel.shape
  per_copy, remainder = divmod(features, patch_size * patch_size * 5)
  if remainder or not per_copy:
    raise ValueError(f'A ({features}, {width}) kernel is not over {patch_size}x'
                     f'{patch_size} patches of 5 copies of the image.')
  if norm_scale is not None:  # its centring and bias are not linear in pixels
    kernel = kernel * np.asarray(norm_scale, np.float64).reshape(-1, 1)
  return kernel.reshape(patch_size, patch_size, 5, per_copy, width)[:, :, 0]

"""What a trained ViT learned: the paper's analyses (Dosovitskiy et al. 2021,
Figures 6 and 7) as pure NumPy functions.

Attention arrays are one layer's probabilities, (batch, heads, tokens, tokens),
rows (queries) summing to 1, with the class token first when the model has one
(`vit_jax.models.attention_weights` returns them in depth order). Patch grids
are row-major, as the patch embedding flattens them.
"""

import numpy as np


def cls_attention(attention: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
  """The class token's attention over the patches, per head, as patch grids.

  (batch, heads, 1 + h*w, 1 + h*w) -> (batch, heads, h, w). Each map sums to
  1 minus the class token's attention to itself.
  """
  attention = np.asarray(attention)
  batch, heads = attention.shape[:2]
  return attention[:, :, 0, 1:].reshape(batch, heads, *grid)


def attention_rollout(attentions: list[np.ndarray]) -> np.ndarray:
  """Attention rollout (Abnar & Zuidema 2020), as in the paper's Figure 6.

  Per layer: average the heads, add the identity for the residual connection,
  renormalise the rows; then multiply the layers, first layer rightmost.
  Returns (batch, tokens, tokens): row i is how much each input token flows
  into output token i.
  """
  rollout = None
  for attention in attentions:
    mixed = np.asarray(attention, np.float64).mean(axis=1)
    mixed = mixed + np.eye(mixed.shape[-1])
    mixed /= mixed.sum(axis=-1, keepdims=True)
    rollout = mixed if rollout is None else mixed @ rollout
  return rollout


def patch_centres(grid: tuple[int, int], patch_size: int) -> np.ndarray:
  """(h*w, 2) pixel coordinates (row, column) of the patch centres."""
  rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]),
                           indexing='ij')
  return (np.stack([rows.ravel(), cols.ravel()], axis=-1) + 0.5) * patch_size


def mean_attention_distance(attention: np.ndarray, grid: tuple[int, int],
                            patch_size: int) -> np.ndarray:
  """Mean attention distance in pixels of each head (the paper's Figure 7).

  For every patch query, the distance between its centre and each key patch's
  centre, weighted by the attention between them, averaged over queries and
  images. Only patch-to-patch attention counts; it is renormalised to sum to 1
  over the patches, since the class token has no position in the image.
  Returns (heads,).
  """
  attention = np.asarray(attention, np.float64)
  num_patches = grid[0] * grid[1]
  prefix = attention.shape[-1] - num_patches
  if prefix < 0:
    raise ValueError(f'{attention.shape[-1]} tokens cannot hold a '
                     f'{grid[0]}x{grid[1]} patch grid.')
  patches = attention[:, :, prefix:, prefix:]
  patches = patches / patches.sum(axis=-1, keepdims=True)
  centres = patch_centres(grid, patch_size)
  distances = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
  return (patches * distances).sum(axis=-1).mean(axis=(0, 2))


def uniform_attention_distance(grid: tuple[int, int],
                               patch_size: int) -> float:
  """The mean attention distance of a head attending to all patches alike:
  the mean distance between two patch centres. A head below it looks near."""
  centres = patch_centres(grid, patch_size)
  return float(
      np.linalg.norm(centres[:, None] - centres[None], axis=-1).mean())


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
  """(n, d) -> (n, n) cosine similarities."""
  vectors = np.asarray(vectors, np.float64)
  unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
  return unit @ unit.T


def position_embedding_similarity(position_embeddings: np.ndarray,
                                  grid: tuple[int, int]) -> np.ndarray:
  """Cosine similarity of every patch position's embedding to every other's.

  `position_embeddings` is the model's (1, tokens, d) or (tokens, d) table; a
  leading class-token entry is dropped. Returns (h, w, h, w): [i, j] is the
  similarity map of position (i, j) against the grid (the paper's Figure 7,
  centre).
  """
  table = np.asarray(position_embeddings).reshape(-1,
                                                  position_embeddings.shape[-1])
  num_patches = grid[0] * grid[1]
  if len(table) < num_patches:
    raise ValueError(f'{len(table)} position embeddings cannot cover a '
                     f'{grid[0]}x{grid[1]} patch grid.')
  table = table[len(table) - num_patches:]
  return cosine_similarity_matrix(table).reshape(*grid, *grid)


def similarity_to_centre(similarity: np.ndarray) -> np.ndarray:
  """The (h, w) similarity map of the centre patch (rounding down)."""
  h, w = similarity.shape[:2]
  return similarity[h // 2, w // 2]


def similarity_distance_correlation(similarity: np.ndarray) -> float:
  """Pearson correlation between the similarity of two positions and their
  Euclidean distance on the patch grid, over all pairs of distinct positions.

  Strongly negative when the embeddings learned 2-D locality (near patches
  alike), near 0 when they carry no spatial structure.
  """
  h, w = similarity.shape[:2]
  centres = patch_centres((h, w), 1)
  distances = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
  pairs = ~np.eye(h * w, dtype=bool)
  return float(np.corrcoef(similarity.reshape(h * w, h * w)[pairs],
                           distances[pairs])[0, 1])


def patch_embedding_components(
    kernel: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
  """Principal components of the patch-embedding filters (Figure 7, left).

  `kernel` is the (p, p, channels, d) patch-embedding convolution: d filters.
  Returns the top `count` components, (count, p, p, channels), each of unit
  norm with its largest-magnitude entry positive, and the share of the
  filters' variance each explains.
  """
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

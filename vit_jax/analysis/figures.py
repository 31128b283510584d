"""The figures `python -m vit_jax.analyze` draws of the measures, as PNGs."""

import numpy as np

from vit_jax.analysis import measures
from vit_jax.analysis import plotting


def _image_rows(path, rows, figsize, titles, suptitle=None, row_titles=()):
  """Rows of (image, colour map) panels, the first row's titled."""
  fig, axes = plotting.pyplot().subplots(len(rows), len(rows[0]),
                                         figsize=figsize, squeeze=False)
  for row_axes, row in zip(axes, rows):
    for ax, (image, cmap) in zip(row_axes, row):
      ax.imshow(image, cmap=cmap)
  for ax, title in [*zip(axes[0], titles), *zip(axes[:, 0], row_titles)]:
    if title:
      ax.set_title(title, fontsize=9)
  for ax in axes.ravel():
    ax.axis('off')
  if suptitle:
    fig.suptitle(suptitle, fontsize=10)
  fig.tight_layout()
  plotting.save_figure(fig, path, dpi=100)


def plot_cls_attention(path, display, maps, token='class', layers=False):
  """Each image beside its `token` token's attention `maps` per head."""
  rows, heads = maps.shape[:2]
  _image_rows(
      path, [[(image, None), *((m, 'inferno') for m in head_maps)]
             for image, head_maps in zip(display, maps)],
      (1.6 * (heads + 1), 1.6 * rows + 0.4 * layers),
      [None, *(f'head {h + 1}' for h in range(heads))],
      f'{"every" if layers else "last"} layer: attention of the '
      f'{token} token\nto each patch', [f'layer {i + 1}'
                                        for i in range(rows)] if layers else ())


def _upsample(grid_map: np.ndarray, image_size: int) -> np.ndarray:
  factor = image_size // grid_map.shape[0]
  return np.kron(grid_map, np.ones((factor, factor)))


def plot_rollout(path, display, rollout_maps):
  """Per image: the image, its rollout map, and the image weighted by it."""
  rows = []
  for image, rollout in zip(display, rollout_maps):
    heat = _upsample(rollout / rollout.max(), image.shape[0])
    rows.append([(image, None), (rollout, 'inferno'),
                 (image * heat[..., None], None)])
  _image_rows(path, rows, (5, 1.7 * len(rows)),
              ('image', 'rollout', 'image x rollout'))


def plot_attention_distance(path, distances: np.ndarray, image_size: int,
                            uniform: float):
  """Every head's mean attention distance against depth."""
  fig, ax = plotting.pyplot().subplots(figsize=(4.5, 3.5))
  layers, heads = distances.shape
  depth = np.arange(1, layers + 1)
  for h in range(heads):
    ax.scatter(depth, distances[:, h], s=14, label=f'head {h + 1}')
  ax.plot(depth, distances.mean(axis=1), 'k-', lw=1, label='mean')
  ax.axhline(uniform, color='gray', linestyle=':', label='uniform attention')
  ax.set(xlabel='network depth (layer)', ylim=(0, image_size),
         ylabel='mean attention distance (pixels)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=6, ncol=2)
  fig.tight_layout()
  plotting.save_figure(fig, path, dpi=120)


def _mosaic(similarity: np.ndarray) -> np.ndarray:
  """(h, w, h, w) -> one image of h x w tiles, a NaN gap between tiles."""
  h, w = similarity.shape[:2]
  tiles = np.full((h, w, h + 1, w + 1), np.nan)
  tiles[:, :, :h, :w] = similarity
  return tiles.transpose(0, 2, 1, 3).reshape(h * (h + 1), w * (w + 1))


def plot_position_embeddings(path, similarity: np.ndarray, correlation: float,
                             title: str | None = None):
  """Each position's similarity map as tiles, and the centre's."""
  fig, axes = plotting.pyplot().subplots(1, 2, figsize=(9, 4.3),
                                         gridspec_kw={'width_ratios': [1.4, 1]})
  image = axes[0].imshow(_mosaic(similarity), cmap='viridis', vmin=-1, vmax=1)
  axes[0].set_title('each position vs all (tile = position)', fontsize=9)
  axes[1].imshow(measures.similarity_to_centre(similarity), cmap='viridis',
                 vmin=-1, vmax=1)
  axes[1].set_title(
      f'similarity to the centre patch\n'
      f'corr(similarity, grid distance) = {correlation:.2f}', fontsize=9)
  for ax in axes:
    ax.set(xticks=[], yticks=[])
  fig.colorbar(image, ax=axes, shrink=0.8, label='cosine similarity')
  if title:
    fig.suptitle(title, fontsize=10)
  plotting.save_figure(fig, path, dpi=120)


def plot_embedding_filters(path, components: np.ndarray, explained: np.ndarray,
                           title: str = 'the patch-embedding filters'):
  """The principal `components` as RGB patches, with the variance shares."""
  columns = 7
  rows = -(-len(components) // columns)
  fig, axes = plotting.pyplot().subplots(rows, columns,
                                         figsize=(1.3 * columns, 1.4 * rows),
                                         squeeze=False)
  for ax in axes.ravel():
    ax.axis('off')
  for ax, component, share in zip(axes.ravel(), components, explained):
    low, high = component.min(), component.max()
    ax.imshow((component - low) / (high - low + 1e-12))
    ax.set_title(f'{100 * share:.1f}%', fontsize=7)
  fig.suptitle(f'principal components of {title}\n(share of variance)',
               fontsize=9)
  fig.tight_layout()
  plotting.save_figure(fig, path, dpi=120)

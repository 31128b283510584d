"""What a trained ViT learned: the paper's analyses (its Figures 6 and 7).

The measures (pure NumPy) are re-exported here; importing this package loads
NumPy only. `python -m vit_jax.analyze` puts them together.
"""

from vit_jax.analysis.measures import attention_rollout
from vit_jax.analysis.measures import cls_attention
from vit_jax.analysis.measures import cosine_similarity_matrix
from vit_jax.analysis.measures import mean_attention_distance
from vit_jax.analysis.measures import patch_centres
from vit_jax.analysis.measures import patch_embedding_components
from vit_jax.analysis.measures import position_embedding_similarity
from vit_jax.analysis.measures import shifted_patch_filters
from vit_jax.analysis.measures import similarity_distance_correlation
from vit_jax.analysis.measures import similarity_to_centre
from vit_jax.analysis.measures import token_to_patches
from vit_jax.analysis.measures import uniform_attention_distance

__all__ = [
    'attention_rollout', 'cls_attention', 'cosine_similarity_matrix',
    'mean_attention_distance', 'patch_centres', 'patch_embedding_components',
    'position_embedding_similarity', 'shifted_patch_filters',
    'similarity_distance_correlation', 'similarity_to_centre',
    'token_to_patches', 'uniform_attention_distance',
]

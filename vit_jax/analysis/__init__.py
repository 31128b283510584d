"""The paper's analyses of a trained ViT (its Figures 6 and 7); the measures,
re-exported here, load NumPy only (`python -m vit_jax.analyze` draws them)."""

# pylint: disable-next=wildcard-import
from vit_jax.analysis.measures import *
from vit_jax.analysis.measures import __all__

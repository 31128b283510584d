"""What a trained ViT learned: the paper's analyses (its Figures 6 and 7)."""

# pylint: disable-next=wildcard-import
from vit_jax.analysis.measures import *
from vit_jax.analysis.measures import __all__

"""What a trained ViT learned: the paper's analyses (its Figures 6 and 7).

The measures (pure NumPy) are re-exported here; importing this package loads
NumPy only. `python -m vit_jax.analyze` puts them together.
"""

# pylint: disable-next=wildcard-import
from vit_jax.analysis.measures import *
from vit_jax.analysis.measures import __all__

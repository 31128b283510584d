"""vit_jax: the Vision Transformer and its small-data CNN baselines in JAX."""

__version__ = '0.1.0'

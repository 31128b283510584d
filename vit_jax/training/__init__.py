"""The training loop and what it runs; a run starts at `train_and_evaluate`
(docs/layout.md lists the modules)."""


def __getattr__(name: str):
  # Lazy: the loop imports nearly every package, and config_schema imports
  # compilation_cache alone.
  if name == 'train_and_evaluate':
    from vit_jax.training import train  # pylint: disable=g-import-not-at-top
    return train.train_and_evaluate
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')

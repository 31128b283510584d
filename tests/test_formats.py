"""vit_jax.formats: the interface the folder formats share."""

import inspect

import pytest

from vit_jax import formats
from vit_jax.checkpoints import reading


def _declared(protocol) -> dict:
  return {
      name: inspect.signature(member) for name, member in vars(protocol).items()
      if inspect.isfunction(member) and not name.startswith('_')
  }


@pytest.mark.parametrize('kind', sorted(reading.FOLDER_FORMATS))
def test_each_folder_format_is_what_the_protocol_declares(kind):
  module = reading.FOLDER_FORMATS[kind]
  assert isinstance(module.NAME, str)
  for name, declared in _declared(formats.FolderFormat).items():
    parameters = list(declared.parameters)[1:]  # without self
    assert list(inspect.signature(getattr(
        module, name)).parameters) == (parameters), f'{kind}.{name}'

"""Checkpoint formats, each a module that reads into our parameter tree and,
where it can, writes back; timm's and transformers' folders: `FolderFormat`."""

import pathlib
from typing import Any, Protocol


class FolderFormat(Protocol):
  """The module interface of `timm` and `hf`."""

  NAME: str  # the other library's model, in messages
  FILES: tuple[str, ...]  # what `write` puts in its folder

  def is_state(self, keys) -> bool:
    """Whether a safetensors file's array names are this format's."""

  def read(self, path: pathlib.Path, model_name: str | None) -> dict:
    """Our parameter tree from the folder or its weights file."""

  def pixels(self, path: pathlib.Path) -> tuple[tuple, tuple]:
    """The (mean, std) the folder states its input is normalized with."""

  def class_names(self, path: pathlib.Path) -> tuple[str, ...]:
    """The names the folder gives its labels, label i's at [i]; () if none."""

  def write(self, directory: pathlib.Path, params: dict, model: Any,
            image_size: int, pixels: tuple[tuple, tuple] = ...,
            class_names: tuple[str, ...] = ...) -> None:
    """The folder, for a model of ours trained with `pixels`."""

"""Checkpoint formats: parameters written by others (and by us for them).

  params.py           what every format shares: key paths, expected shapes,
                      the fit check, and fitting a pre-trained tree to a new
                      model
  npz.py              the official google-research/vision_transformer `.npz`
  timm.py             timm's VisionTransformer: model.safetensors and the hub
                      folder's config.json
  hf.py               transformers' ViTForImageClassification folder
  vit_model.py        the ViT a tree of any format is, and what the folder
                      formats share (their JSON, the normalisation stated)
  torch_layout.py     PyTorch's names and array layouts, by rules
  safetensors_file.py the .safetensors file, read and written without torch

A new format is a module here that reads into our parameter tree (the
official linen model's) and, where it can, writes back; one held in a
folder, as timm's and transformers', is a `FolderFormat`.
"""

import pathlib
from typing import Any, Protocol


class FolderFormat(Protocol):
  """What `timm` and `hf` each are (as modules), and what
  `reading.load` and `export.convert` call them by."""

  NAME: str  # the other library's model, in messages
  FILES: tuple[str, ...]  # what `write` puts in its folder

  def is_state(self, keys) -> bool:
    """Whether a safetensors file's array names are this format's."""

  def read(self, path: pathlib.Path, model_name: str | None) -> dict:
    """Our parameter tree from the folder or its weights file."""

  def pixels(self, path: pathlib.Path) -> tuple[tuple, tuple]:
    """The (mean, std) the folder states its input is normalised with."""

  def write(self, directory: pathlib.Path, params: dict, model: Any,
            image_size: int, pixels: tuple[tuple, tuple] = ...) -> None:
    """The folder, for a model of ours trained with `pixels`."""

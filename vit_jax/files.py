"""Files written whole or not at all, and the image files we read.

A process killed while it writes leaves the old file or the new one, never
half of one: every file a later run or reader trusts (config.json,
summary.json, a released-format .npz, an experiment's results.json and
figures) is written under a temporary name and renamed into place.
"""

from collections.abc import Callable
import os
import pathlib

# The image files an image folder, `vit_jax.analyze --images` and the
# experiments read (what PIL decodes that people keep photos in).
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png')


def is_image_file(path: pathlib.Path) -> bool:
  return path.suffix.lower() in IMAGE_SUFFIXES


def replace_atomically(path: pathlib.Path,
                       write: Callable[[pathlib.Path], None]) -> None:
  """Calls `write(partial)` for a temporary path beside `path`, then renames
  it to `path`; a failed `write` leaves no temporary file behind."""
  path = pathlib.Path(path)
  partial = path.with_name(path.name + '.partial')
  try:
    write(partial)
    os.replace(partial, path)
  except BaseException:
    partial.unlink(missing_ok=True)
    raise


def write_atomically(path: pathlib.Path, text: str) -> None:
  """`text` as the whole content of `path` (see `replace_atomically`)."""
  replace_atomically(path, lambda partial: partial.write_text(text))

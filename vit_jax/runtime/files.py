"""Files written whole or not at all, and the image files we read.

A process killed while it writes leaves the old file or the new one, never
half of one: every file a later run or reader trusts (config.json,
summary.json, a released-format .npz, an experiment's results.json and
figures) is written under a temporary name and renamed into place. A set of
files that belong together (a timm or transformers folder) is written into
a temporary directory that then takes the place of the old one
(`replace_directory_atomically`); files that belong together in a folder
that holds others too (an experiment's records beside its README) are
written first and renamed together (`replace_together`).
"""

from collections.abc import Callable
import os
import pathlib
import shutil

from vit_jax import errors
from vit_jax.runtime import stop_signals

# The image files an image folder, `vit_jax.analyze --images` and the
# experiments read (what PIL decodes that people keep photos in).
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png')
PARTIAL_SUFFIX = '.partial'


def is_image_file(path: pathlib.Path) -> bool:
  return path.suffix.lower() in IMAGE_SUFFIXES


def partial_path(path: pathlib.Path) -> pathlib.Path:
  """Where `path` is written before it is renamed into place: a file or
  folder named so is unfinished, and the next writer removes it."""
  return path.with_name(path.name + PARTIAL_SUFFIX)


def replace_atomically(path: pathlib.Path,
                       write: Callable[[pathlib.Path], None]) -> None:
  """Calls `write(partial)` for a temporary path beside `path`, then renames
  it to `path`; a failed `write` leaves no temporary file behind."""
  replace_together({path: write})


def replace_together(
    writes: dict[pathlib.Path, Callable[[pathlib.Path], None]]) -> None:
  """Each `write(partial)` of `writes` for a temporary path beside its
  path, then every partial renamed into place, a stop signal waiting for
  the renames (`stop_signals.not_stopped_within`): the files (an
  experiment's results.json, figure and README) are the old set or the
  whole new one. A failed write, or a stop signal during the writes
  (`stop_signals.remove_on_stop`), leaves every path as it was and no
  temporary file. Only a process killed within the renames' microseconds
  leaves a mix."""
  partials = {}
  try:
    for path, write in writes.items():
      path = pathlib.Path(path)
      partials[path] = partial_path(path)
      stop_signals.remove_on_stop(partials[path])
      write(partials[path])
    with stop_signals.not_stopped_within():
      for path, partial in partials.items():
        os.replace(partial, path)
  except BaseException:
    for partial in partials.values():
      partial.unlink(missing_ok=True)
    raise
  finally:
    for partial in partials.values():
      stop_signals.remove_on_stop(partial, remove=False)


def write_atomically(path: pathlib.Path, text: str) -> None:
  """`text` as the whole content of `path` (see `replace_atomically`)."""
  replace_atomically(path, lambda partial: partial.write_text(text))


def foreign_files(directory: pathlib.Path,
                  ours: Callable[[str], bool]) -> str | None:
  """The names in `directory` that `ours` does not claim, listed ('a, b'),
  the first five then '...'; None when there are none (or no directory):
  what `replace_directory_atomically` would lose of it."""
  directory = pathlib.Path(directory)
  others = sorted(p.name for p in directory.iterdir()
                  if not ours(p.name)) if directory.is_dir() else []
  if not others:
    return None
  return ', '.join(others[:5]) + (' ...' if len(others) > 5 else '')


def replace_directory_atomically(path: pathlib.Path,
                                 write: Callable[[pathlib.Path], None]) -> None:
  """Calls `write(partial)` for a fresh temporary directory beside `path`,
  then renames it to `path`, the directory there before moved aside and
  removed: `path` holds the old set of files or the whole new one. A failed
  `write`, or a stop signal during it (`stop_signals.remove_on_stop`),
  leaves `path` as it was and no temporary directory; a signal waits for
  the renames (`stop_signals.not_stopped_within`). What a process killed
  between the renames left is put back first. `path` (a symlink's target)
  must not be a mount point: it is renamed."""
  path = pathlib.Path(os.path.realpath(path))
  if os.path.ismount(path):
    raise errors.VitJaxError(f'{path} is a mount point, which cannot be '
                             'replaced whole: pass a folder inside it.')
  partial = partial_path(path)
  replaced = path.with_name(path.name + '.replaced')
  if replaced.is_dir() and not path.exists():
    os.replace(replaced, path)  # killed between the renames: the old set
  for leftover in (partial, replaced):
    shutil.rmtree(leftover, ignore_errors=True)
  try:
    # A signal between the two would leave the folder behind.
    with stop_signals.not_stopped_within():
      partial.mkdir(parents=True)
      stop_signals.remove_on_stop(partial)
    write(partial)
  except BaseException:
    stop_signals.remove_on_stop(partial, remove=False)
    shutil.rmtree(partial, ignore_errors=True)
    raise
  with stop_signals.not_stopped_within():
    stop_signals.remove_on_stop(partial, remove=False)
    try:
      if path.exists():
        os.replace(path, replaced)
      os.replace(partial, path)
    except BaseException:
      if replaced.exists() and not path.exists():
        os.replace(replaced, path)
      shutil.rmtree(partial, ignore_errors=True)
      raise
  shutil.rmtree(replaced, ignore_errors=True)

"""Files written whole or not at all; the JSON and image files we read."""

from collections.abc import Callable
import json
import os
import pathlib
import re
import shutil
from typing import Any

from vit_jax import errors
from vit_jax.runtime import stop_signals

# What PIL decodes that people keep photos in; in words, for messages.
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png')
IMAGE_TYPES = ', '.join(IMAGE_SUFFIXES[:-1]) + ' or ' + IMAGE_SUFFIXES[-1]
PARTIAL_SUFFIX = '.partial'
# Writes a file or folder whole at the (partial) path it is given.
Writer = Callable[[pathlib.Path], None]


def _umask() -> int:
  # Read, not set: os.umask sets it, and a file another thread creates
  # meanwhile would get the mode of the value set.
  try:
    status = pathlib.Path('/proc/self/status').read_text()
    return int(re.search(r'^Umask:\s*([0-7]+)', status, re.M).group(1), 8)
  except (OSError, AttributeError):  # not Linux
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


def is_image_file(path: pathlib.Path) -> bool:
  return path.suffix.lower() in IMAGE_SUFFIXES


def partial_path(path: pathlib.Path) -> pathlib.Path:
  """Where `path` is written before its rename; the next writer removes it."""
  return path.with_name(path.name + PARTIAL_SUFFIX)


def replace_atomically(path: pathlib.Path, write: Writer) -> None:
  """`write(partial)` for a temporary path, then renamed to `path`."""
  replace_together({path: write})


def replace_together(writes: dict[pathlib.Path, Writer]) -> None:
  """Each `write(partial)`, then every partial renamed into place."""
  partials, mode = {}, 0o666 & ~_umask()
  try:
    for path, write in writes.items():
      partial = partials[path] = partial_path(pathlib.Path(path))
      stop_signals.remove_on_stop(partial)
      write(partial)
      if partial.is_file():
        # Writers that go through a temporary file of their own
        # (safetensors) leave it 0600.
        os.chmod(partial, mode)
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
  """`text` as the whole content of `path`, replaced atomically."""
  replace_atomically(path, lambda partial: partial.write_text(text))


def write_json(path: pathlib.Path, value: Any,
               indent: int | None = None) -> None:
  """`value` as the whole JSON content of `path`, replaced atomically."""
  write_atomically(path, json.dumps(value, indent=indent))


def read_json(path: pathlib.Path) -> tuple[Any, str]:
  """The JSON `path` holds, or None and what is wrong with the file."""
  try:
    return json.loads(pathlib.Path(path).read_text()), ''
  except FileNotFoundError:
    return None, 'is missing'
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    return None, f'is not valid JSON ({e})'
  except OSError as e:
    return None, f'cannot be read ({e.strerror or e})'


def some_names(names: list[str], shown: int = 5) -> str:
  """The first `shown` of `names` for a message, ' ...' when there are more."""
  return ', '.join(names[:shown]) + (' ...' if len(names) > shown else '')


def listed(names: list[str], shown: int = 20, separator: str = '; ') -> str:
  """The first `shown` of `names` joined by `separator`, the rest counted."""
  more = [f'... and {len(names) - shown} more'] if len(names) > shown else []
  return separator.join(names[:shown] + more)


def foreign_files(directory: pathlib.Path, ours: Callable[[str],
                                                          bool]) -> str | None:
  """Names in `directory` that `ours` does not claim ('a, b', 5 and '...')."""
  others = sorted(p.name for p in directory.iterdir()
                  if not ours(p.name)) if directory.is_dir() else []
  return some_names(others) if others else None


def replace_directory_atomically(path: pathlib.Path, write: Writer) -> None:
  """`write(partial)` for a fresh directory that then replaces `path`."""
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

"""jax's persistent compilation cache, on for every training run: a run of a
config compiled before (on this machine, with this jax) loads its programs
from disk instead of compiling them again.

`config.compilation_cache_dir` says where (`DEFAULT_DIRECTORY`, or jax's own
$JAX_COMPILATION_CACHE_DIR when that is set and the config keeps the
default); empty turns it off. jax keys each program by its computation,
compile options, devices and jax version, so one directory serves every
config, backend and version; of several processes of a job only process 0
writes, and two runs sharing it at once read what is there. jax writes an
entry in place and never replaces one: an entry it cannot read (a run killed
while writing it, another run still writing it) is removed here, with one
warning line, and compiled again (`_remove_unreadable`).
"""

import glob
import logging as python_logging
import os
import pathlib
import re
import threading
import warnings

from absl import logging
import jax
from jax.experimental.compilation_cache import compilation_cache

DEFAULT_DIRECTORY = '~/.cache/vit_jax/compilation_cache'
ENVIRONMENT = 'JAX_COMPILATION_CACHE_DIR'

# Every program is kept, not only those over jax's default of a second: the
# small ones (initialisation, the first evaluation's) add up to seconds of a
# short run's start.
_MIN_COMPILE_SECONDS = 0.0


def directory(configured: str) -> str | None:
  """Where `config.compilation_cache_dir = configured` keeps programs;
  None when off."""
  if configured == DEFAULT_DIRECTORY and os.environ.get(ENVIRONMENT):
    return os.environ[ENVIRONMENT]
  return os.path.expanduser(configured) if configured else None


def use(configured: str) -> None:
  """Compiles through the cache `directory(configured)` from now on in this
  process (or without one)."""
  global _show_warning
  if warnings.showwarning is not _remove_unreadable:
    # Again after a `warnings.catch_warnings` block put Python's back.
    _show_warning, warnings.showwarning = (warnings.showwarning,
                                           _remove_unreadable)
  jax.config.update('jax_persistent_cache_min_compile_time_secs',
                    _MIN_COMPILE_SECONDS)
  path = directory(configured)
  if path == jax.config.jax_compilation_cache_dir:
    return
  compilation_cache.set_cache_dir(path)
  # jax opens its cache at its first compilation: a process that compiled
  # before (a test, a notebook) reopens it here. Quietly: jax logs the reset.
  jax_logger = python_logging.getLogger(compilation_cache.reset_cache.__module__)
  level = jax_logger.level
  jax_logger.setLevel(python_logging.WARNING)
  try:
    compilation_cache.reset_cache()
  finally:
    jax_logger.setLevel(level)
  logging.info('Compilation cache: %s.', path or 'off')


# What jax warns, and then compiles the program, when an entry does not
# load; its entries are files named PROGRAM-KEY-cache.
_UNREADABLE = re.compile(
    r"Error reading persistent compilation cache entry for '([^']+)'")
_show_warning = None  # Python's, which `_remove_unreadable` stands in for


def _remove_unreadable(message, category, filename, lineno, file=None,
                       line=None):
  """A `warnings.showwarning` that turns jax's warning about an unreadable
  entry into one line and removes the program's entries, so that the
  compilation that follows writes a sound one (jax writes none over an
  existing file); other warnings are shown as Python shows them."""
  unreadable = _UNREADABLE.match(str(message))
  path = jax.config.jax_compilation_cache_dir
  if unreadable is None or not path:
    _show_warning(message, category, filename, lineno, file, line)
    return
  program = unreadable.group(1)
  for entry in pathlib.Path(path).glob(f'{glob.escape(program)}-*-cache'):
    entry.unlink(missing_ok=True)
  logging.warning('The compilation cache %s held an entry of %s that does '
                  'not load (a run killed while writing it?): removed, and '
                  'compiled again.', path, program)


_HIT = '/jax/compilation_cache/cache_hits'


class Hits:
  """Counts the programs this thread loads from the cache while it is
  entered (jax records a hit in the thread that compiles; another may be
  compiling beside it)."""

  def __init__(self):
    self.count = 0
    self._thread = threading.get_ident()

  def _listen(self, event: str, **_):
    if event == _HIT and threading.get_ident() == self._thread:
      self.count += 1

  def __enter__(self) -> 'Hits':
    jax.monitoring.register_event_listener(self._listen)
    return self

  def __exit__(self, *_):
    jax.monitoring.unregister_event_listener(self._listen)

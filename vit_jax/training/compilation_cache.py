"""jax's persistent compilation cache in `config.compilation_cache_dir`."""

import collections
import glob
import logging as python_logging
import os
import pathlib
import re
import tempfile
import threading
import warnings

from absl import logging
import jax
from jax.experimental.compilation_cache import compilation_cache

DEFAULT_DIRECTORY = '~/.cache/vit_jax/compilation_cache'
ENVIRONMENT = 'JAX_COMPILATION_CACHE_DIR'

# Below jax's default of a second too: small ones add up at a run's start.
_MIN_COMPILE_SECONDS = 0.0


def directory(configured: str) -> str | None:
  """Where `compilation_cache_dir = configured` keeps programs, or None."""
  if configured == DEFAULT_DIRECTORY and os.environ.get(ENVIRONMENT):
    return os.environ[ENVIRONMENT]
  return os.path.expanduser(configured) if configured else None


def use(configured: str) -> None:
  """Compiles through the cache `directory(configured)` in this process."""
  global _show_warning
  if warnings.showwarning is not _remove_unreadable:
    # A `warnings.catch_warnings` block may have put Python's back.
    _show_warning, warnings.showwarning = (warnings.showwarning,
                                           _remove_unreadable)
  jax.config.update('jax_persistent_cache_min_compile_time_secs',
                    _MIN_COMPILE_SECONDS)
  path = directory(configured)
  if problem := path and _cannot_write(path):
    logging.warning(
        'The compilation cache %s cannot be written (%s): this '
        'run compiles without it.', path, problem)
    path = None
  if path == jax.config.jax_compilation_cache_dir:
    return
  compilation_cache.set_cache_dir(path)
  # jax opens its cache at its first compilation; a process that has compiled
  # (a test, a notebook) reopens it here, quietly.
  jax_logger = python_logging.getLogger(
      compilation_cache.reset_cache.__module__)
  level = jax_logger.level
  jax_logger.setLevel(python_logging.WARNING)
  try:
    compilation_cache.reset_cache()
  finally:
    jax_logger.setLevel(level)
  logging.info('Compilation cache: %s.', path or 'off')


def _cannot_write(path: str) -> str | None:
  """Why `path` cannot hold the cache (a file, read-only, full), or None."""
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryFile(dir=path) as probe:
      probe.write(bytes(1 << 16))
      probe.flush()
      os.fsync(probe.fileno())
  except OSError as e:
    return e.strerror or str(e)
  return None


# jax's warnings for an entry that does not load or cannot be written;
# entries are PROGRAM-KEY-cache.
_ENTRY = re.compile(r'Error (reading|writing) persistent compilation cache '
                    r"entry for '([^']+)': (.*)")
_show_warning = None  # Python's, which `_remove_unreadable` stands in for
_unwritable_said: list[str] = []  # the cache said unwritable, once a run


def _remove_unreadable(message, category, filename, lineno, file=None,
                       line=None):
  """A `warnings.showwarning` that removes the entries jax fails to use."""
  # jax never replaces an entry: one it cannot read is compiled every run.
  entry, path = _ENTRY.match(str(message)), jax.config.jax_compilation_cache_dir
  if entry is None or not path:
    _show_warning(message, category, filename, lineno, file, line)
    return
  action, program, error = entry.groups()
  for found in pathlib.Path(path).glob(f'{glob.escape(program)}-*-cache'):
    found.unlink(missing_ok=True)
  if action == 'reading':
    logging.warning(
        'The compilation cache %s held an entry of %s that does '
        'not load (a run killed while writing it?): removed, and '
        'compiled again.', path, program)
  elif path not in _unwritable_said:
    _unwritable_said.append(path)
    logging.warning(
        'The compilation cache %s cannot be written (%s): this run goes on '
        'without adding to it.', path, error)


_HIT = '/jax/compilation_cache/cache_hits'


class Hits:
  """Counts the programs each thread loads from the cache while entered."""

  def __init__(self):
    self.by_thread = collections.Counter()

  # One listener for every thread: jax iterates its listeners unlocked, so
  # one removed while another thread records could go unheard.
  def _listen(self, event: str, **_):
    if event == _HIT:
      self.by_thread[threading.get_ident()] += 1

  def __enter__(self) -> 'Hits':
    jax.monitoring.register_event_listener(self._listen)
    return self

  def __exit__(self, *_):
    jax.monitoring.unregister_event_listener(self._listen)

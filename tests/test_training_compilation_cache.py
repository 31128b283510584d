"""The persistent compilation cache: default, shared, bad entries redone."""

import os
import pathlib
import warnings

import jax
import pytest

from tests import helpers
from vit_jax import config_schema
from vit_jax.training import compilation_cache


def test_the_default_is_under_the_users_cache_unless_jax_is_told_another(
    monkeypatch):
  default = config_schema.defaults().compilation_cache_dir
  assert default == compilation_cache.DEFAULT_DIRECTORY
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  assert compilation_cache.directory(default) == os.path.expanduser(
      '~/.cache/vit_jax/compilation_cache')
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '/elsewhere')
  assert compilation_cache.directory(default) == '/elsewhere'
  assert compilation_cache.directory('/mine') == '/mine'  # said, so used
  assert compilation_cache.directory('') is None  # off


def _compiled_line(log: pathlib.Path) -> str:
  return next(line for line in log.read_text().splitlines()
              if 'Compiled the train and eval steps' in line)


@pytest.mark.slow  # 34 s: four runs in processes of their own
def test_runs_share_a_cache_and_a_rerun_compiles_from_it(tmp_path):
  """Two runs fill one cache; a truncated entry compiles again; all agree."""
  data_dir = helpers.cifar10_release(tmp_path / 'data', 80)
  config_file = helpers.write_process_config(tmp_path, data_dir, 'tiny_config',
                                             total_steps=8, cpu_devices=1)
  cache = tmp_path / 'cache'
  flags = (f'--config.compilation_cache_dir={cache}',)

  def run(*names):
    processes = [
        helpers.start_main(config_file, tmp_path / name,
                           tmp_path / f'{name}.log', *flags) for name in names
    ]
    assert helpers.wait_all(processes) == [0] * len(names), [
        (tmp_path / f'{name}.log').read_text()[-2000:] for name in names
    ]

  run('first', 'second')
  [entry] = cache.glob('jit_train_steps-*')
  entry.write_bytes(entry.read_bytes()[:entry.stat().st_size // 2])
  run('third')
  log = (tmp_path / 'third.log').read_text()
  assert _compiled_line(
      tmp_path /
      'third.log').endswith('s (eval step from the compilation cache).')
  assert 'Traceback' not in log and 'warnings.warn' not in log
  assert (f'The compilation cache {cache} held an entry of jit_train_steps '
          'that does not load (a run killed while writing it?): removed, '
          'and compiled again.') in log
  run('fourth')  # the entries written again load
  assert _compiled_line(tmp_path / 'fourth.log').endswith(
      '(train step and eval step from the compilation cache).')
  assert 'does not load' not in (tmp_path / 'fourth.log').read_text()
  expected = helpers.untimed_history(tmp_path / 'first')
  for name in ('second', 'third', 'fourth'):
    assert helpers.untimed_history(tmp_path / name) == expected


def test_an_empty_directory_turns_the_cache_off(caplog):
  caplog.set_level('INFO', logger='absl')
  kept = (jax.config.jax_compilation_cache_dir,
          jax.config.jax_persistent_cache_min_compile_time_secs)
  try:
    compilation_cache.use('')
    assert jax.config.jax_compilation_cache_dir is None
    assert 'Compilation cache: off.' in caplog.text
  finally:  # the suite's cache again, and its minimum (`use` sets 0)
    compilation_cache.use(kept[0])
    jax.config.update('jax_persistent_cache_min_compile_time_secs', kept[1])


def test_a_cache_that_cannot_be_written_is_one_warning_and_no_entry(
    tmp_path, caplog):
  """A file at its path, a full disk, a failed write: one line, no entry."""
  before = jax.config.jax_compilation_cache_dir
  (tmp_path / 'file').write_text('')
  try:
    compilation_cache.use(str(tmp_path / 'file'))
    assert jax.config.jax_compilation_cache_dir is None
    with helpers.mounted_tmpfs(tmp_path / 'full', '64k') as full:
      (full / 'filler').write_bytes(bytes(48 << 10))
      compilation_cache.use(str(full))
  finally:
    compilation_cache.use(before)
  lines = [r.getMessage() for r in caplog.records]
  assert lines[0] == (f'The compilation cache {tmp_path / "file"} cannot be '
                      'written (File exists): this run compiles without it.')
  assert lines[1] == (f'The compilation cache {full} cannot be written (No '
                      'space left on device): this run compiles without it.')
  caplog.clear()
  half_written = pathlib.Path(before) / 'jit_step-0123-cache'
  half_written.write_bytes(b'')
  for _ in range(2):
    warnings.warn("Error writing persistent compilation cache entry for "
                  "'jit_step': OSError: [Errno 28] No space left on device")
  assert not half_written.exists()
  assert [r.getMessage() for r in caplog.records] == [
      f'The compilation cache {before} cannot be written (OSError: [Errno '
      '28] No space left on device): this run goes on without adding to it.'
  ]

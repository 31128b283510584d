"""vit_jax/runtime/files.py: files written whole or not at all."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests import helpers
from vit_jax.errors import VitJaxError
from vit_jax.runtime import files


def test_a_writer_killed_while_writing_leaves_a_whole_file(tmp_path):
  # Rewrites a 7 MB results.json, old and new records in turn, until killed
  # with -9, as a session's end kills an experiment's runner.
  results = tmp_path / 'results.json'
  writer = subprocess.Popen([
      sys.executable, '-c', f"""
import json, pathlib
from vit_jax.runtime import files
results = pathlib.Path({str(results)!r})
texts = [json.dumps([{{'seed': seed}}] * 2 ** 19) for seed in (0, 1)]
for i in range(10**6):
  files.write_atomically(results, texts[i % 2])
"""
  ], cwd=helpers.ROOT)
  helpers.wait_until(results.exists)
  time.sleep(0.5)
  writer.send_signal(signal.SIGKILL)
  assert writer.wait() == -signal.SIGKILL
  records = json.loads(results.read_text())
  assert len(records) == 2**19 and len({r['seed'] for r in records}) == 1


def _folder(path, **files):
  path.mkdir(parents=True)
  for name, text in files.items():
    (path / name).write_text(text)


def _written(path) -> dict:
  return {p.name: p.read_text() for p in sorted(path.iterdir())}


def _write_new(partial):
  (partial / 'a').write_text('new')


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
  dest = tmp_path / 'export'
  _folder(dest, a='old', b='old')
  files.replace_directory_atomically(dest, _write_new)
  assert _written(dest) == {'a': 'new'}

  def fails(partial):
    (partial / 'a').write_text('newer')
    raise OSError(28, 'No space left on device')

  with pytest.raises(OSError):
    files.replace_directory_atomically(dest, fails)
  assert _written(dest) == {'a': 'new'}
  assert sorted(p.name for p in tmp_path.iterdir()) == ['export']

  shutil.rmtree(dest)
  _folder(tmp_path / 'export.replaced', a='old')  # dest moved aside, then
  _folder(tmp_path / 'export.partial', a='half')  # the process killed
  files.replace_directory_atomically(dest, _write_new)  # mends it
  assert _written(dest) == {'a': 'new'}
  assert sorted(p.name for p in tmp_path.iterdir()) == ['export']

  # A symlink has its target replaced.
  (tmp_path / 'link').symlink_to(dest)
  _folder(dest / 'b')
  files.replace_directory_atomically(tmp_path / 'link', _write_new)
  assert (tmp_path / 'link').is_symlink()
  assert _written(tmp_path / 'link') == {'a': 'new'}
  assert sorted(p.name for p in tmp_path.iterdir()) == ['export', 'link']


def test_a_mount_point_is_refused_in_one_line(tmp_path):
  with helpers.mounted_tmpfs(tmp_path / 'disk', '64k') as disk:
    (disk / 'a').write_text('old')
    with pytest.raises(
        VitJaxError, match=r'is a mount point, which cannot '
        r'be replaced whole: pass a folder inside it\.'):
      files.replace_directory_atomically(disk, lambda partial: None)
    assert _written(disk) == {'a': 'old'}


def test_files_replaced_together_are_all_new_or_all_as_they_were(tmp_path):
  paths = [tmp_path / 'results.json', tmp_path / 'README.md']
  for path in paths:
    path.write_text('old')

  def fail(partial):
    partial.write_text('half')
    raise OSError(28, 'No space left on device')

  with pytest.raises(OSError):
    files.replace_together({
        paths[0]: lambda p: p.write_text('new'), paths[1]: fail
    })
  assert sorted(tmp_path.iterdir()) == sorted(paths)
  assert [p.read_text() for p in paths] == ['old', 'old']
  files.replace_together({path: lambda p: p.write_text('new') for path in paths})
  assert [p.read_text() for p in paths] == ['new', 'new']
  assert sorted(tmp_path.iterdir()) == sorted(paths)


_STOPPED_AS_THE_FOLDER_IS_MADE = '''
import os, pathlib, signal, sys, time
from vit_jax.runtime import files, stop_signals
stop_signals.catch(at_once='stopped; --out is as it was')
made = pathlib.Path.mkdir

def mkdir_then_ctrl_c(self, *args, **kwargs):
  made(self, *args, **kwargs)
  os.kill(os.getpid(), signal.SIGINT)
  time.sleep(2)  # the signal's watcher acts meanwhile, where it may

pathlib.Path.mkdir = mkdir_then_ctrl_c
files.replace_directory_atomically(pathlib.Path(sys.argv[1]),
                                   lambda partial: time.sleep(30))
'''


def test_ctrl_c_as_the_temporary_folder_is_made_leaves_none(tmp_path):
  """Ctrl-C before the folder is known as unfinished."""
  (tmp_path / 'out').mkdir()
  (tmp_path / 'out' / 'earlier.png').write_text('earlier')
  run = helpers.run_python('-c', _STOPPED_AS_THE_FOLDER_IS_MADE,
                           tmp_path / 'out', timeout=60, status=130)
  assert run.stderr.strip().splitlines()[-1] == (
      'Ctrl-C: stopped; --out is as it was.')
  assert [p.name for p in tmp_path.iterdir()] == ['out']
  assert (tmp_path / 'out' / 'earlier.png').read_text() == 'earlier'

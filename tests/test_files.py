"""vit_jax/files.py: files written whole or not at all."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from vit_jax import files


def test_a_writer_killed_while_writing_leaves_a_whole_file(tmp_path):
  # Rewrites a 7 MB results.json, old and new records in turn, until killed
  # with -9, as a session's end kills an experiment's runner.
  results = tmp_path / 'results.json'
  writer = subprocess.Popen([sys.executable, '-c', f"""
import json, pathlib
from vit_jax import files
results = pathlib.Path({str(results)!r})
texts = [json.dumps([{{'seed': seed}}] * 2 ** 19) for seed in (0, 1)]
for i in range(10**6):
  files.write_atomically(results, texts[i % 2])
"""], cwd=ROOT)
  deadline = time.monotonic() + 60
  while not results.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  time.sleep(0.5)
  writer.send_signal(signal.SIGKILL)
  assert writer.wait() == -signal.SIGKILL
  records = json.loads(results.read_text())
  assert len(records) == 2 ** 19 and len({r['seed'] for r in records}) == 1


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path):
  path = tmp_path / 'results.json'
  files.write_atomically(path, 'old')

  def fail(partial):
    partial.write_text('half')
    raise OSError('disk full')

  with pytest.raises(OSError, match='disk full'):
    files.replace_atomically(path, fail)
  assert path.read_text() == 'old'
  assert [p.name for p in tmp_path.iterdir()] == ['results.json']

"""One run per workdir: the lock a second run meets, never left by a kill."""

import json
import os
import socket
import threading
import time

import pytest

from vit_jax.errors import WorkdirError
from vit_jax.runtime import workdir_lock


def test_a_second_holder_is_refused_with_the_first_named(tmp_path, monkeypatch):
  monkeypatch.setattr(workdir_lock, 'RENEW_SECONDS', 0.05)
  with workdir_lock.WorkdirLock(tmp_path / 'run') as lock:
    with pytest.raises(WorkdirError) as refused:
      workdir_lock.WorkdirLock(tmp_path / 'run').acquire()
    assert str(refused.value).startswith(
        f'The workdir {tmp_path / "run"} is in use by another run (process '
        f'{os.getpid()} on {socket.gethostname()}, since ')
    assert 'Wait until it ends' in str(refused.value)
    # The holder renews its lock.
    os.utime(lock.path, (0, 0))
    time.sleep(0.5)
    assert time.time() - lock.path.stat().st_mtime < 5
  # Let go: the next run takes it.
  with workdir_lock.WorkdirLock(tmp_path / 'run'):
    pass


def test_a_workdir_created_for_nothing_is_removed_and_others_are_kept(tmp_path):
  with workdir_lock.WorkdirLock(tmp_path / 'new' / 'run'):
    assert (tmp_path / 'new' / 'run' / 'lock').exists()
  assert not (tmp_path / 'new').exists()

  with workdir_lock.WorkdirLock(tmp_path / 'run') as lock:
    (tmp_path / 'run' / 'config.json').write_text('{}')
  assert lock.path.read_text() == ''  # names no holder
  assert (tmp_path / 'run' / 'config.json').exists()


def _lock_held_by(workdir, renewed_seconds_ago, host='elsewhere', pid=7):
  workdir.mkdir()
  (workdir / 'lock').write_text(
      json.dumps(dict(host=host, pid=pid, since='2026-11-25T08:00:00+00:00')))
  os.utime(workdir / 'lock', (time.time() - renewed_seconds_ago,) * 2)


def test_another_hosts_renewed_lock_is_refused_until_it_lapses(
    tmp_path, monkeypatch):
  """Where flock does not reach across hosts, the renewal time does."""
  monkeypatch.setattr(workdir_lock, 'WATCH_SECONDS', 1.0)
  _lock_held_by(tmp_path / 'fresh', renewed_seconds_ago=5)
  with pytest.raises(
      WorkdirError, match=r'\(process 7 on elsewhere, since 2026-11-25T08:00'
      r':00\+00:00, renewed 5 s ago; if that run is gone, its '
      r'lock lapses 55 s from now\)'):
    workdir_lock.WorkdirLock(tmp_path / 'fresh').acquire()
  assert 'elsewhere' in (tmp_path / 'fresh' / 'lock').read_text()

  _lock_held_by(tmp_path / 'lapsed',
                renewed_seconds_ago=workdir_lock.STALE_SECONDS + 1)
  with workdir_lock.WorkdirLock(tmp_path / 'lapsed') as lock:
    assert json.loads(lock.path.read_text())['host'] == socket.gethostname()

  # A live holder whose clock is two minutes behind this host's.
  _lock_held_by(tmp_path / 'behind', renewed_seconds_ago=120)
  stop = threading.Event()

  def renew_behind():
    while not stop.wait(0.05):
      os.utime(tmp_path / 'behind' / 'lock', (time.time() - 120,) * 2)

  renewing = threading.Thread(target=renew_behind)
  renewing.start()
  try:
    with pytest.raises(
        WorkdirError, match=r'elsewhere, since .*, renewed within 1 s, '
        r'though its time is 120 s behind'):
      workdir_lock.WorkdirLock(tmp_path / 'behind').acquire()
  finally:
    stop.set()
    renewing.join()
  assert 'elsewhere' in (tmp_path / 'behind' / 'lock').read_text()


def test_without_flock_a_lock_naming_this_process_is_a_dead_runs(
    tmp_path, monkeypatch):
  """A restarted container's run may get the dead run's process id."""
  monkeypatch.setattr(workdir_lock.WorkdirLock, '_lock', lambda self, fd: False)
  _lock_held_by(tmp_path / 'run', 0, socket.gethostname(), os.getpid())
  with workdir_lock.WorkdirLock(tmp_path / 'run') as lock:
    assert json.loads(
        lock.path.read_text())['since'] != '2026-11-25T08:00:00+00:00'

"""One run per workdir: `workdir/lock`, held by process 0, names its holder."""

import dataclasses
import datetime
import errno
import fcntl
import json
import os
import pathlib
import socket
import threading
import time

from absl import logging

from vit_jax.errors import WorkdirError

LOCK_FILE = 'lock'
# The kernel releases a dead holder's flock; flock may not reach other hosts, so
# the holder renews the file's time every RENEW_SECONDS and another host takes
# over once the renewal is STALE_SECONDS old by its clock and the file's time
# stands still for WATCH_SECONDS (hosts' clocks may disagree by more).
RENEW_SECONDS = 10.0
STALE_SECONDS = 60.0
WATCH_SECONDS = 2 * RENEW_SECONDS


@dataclasses.dataclass(frozen=True)
class Holder:
  host: str
  pid: int
  since: str  # ISO 8601, local time with its offset

  def describe(self) -> str:
    return f'process {self.pid} on {self.host}, since {self.since}'


def _holder_in(fd: int) -> Holder | None:
  """The holder the lock file names; None when it is empty or torn."""
  try:
    fields = json.loads(os.pread(fd, 4096, 0))
    return Holder(str(fields['host']), int(fields['pid']), str(fields['since']))
  except (ValueError, KeyError, TypeError):  # UnicodeDecodeError included
    return None


def process_exists(pid: int) -> bool:
  """Whether process `pid` runs on this host (another user's too)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's
    pass
  return True


class WorkdirLock:
  """The lock of `workdir`, taken by `acquire` and let go by `release`."""

  def __init__(self, workdir: pathlib.Path):
    self.workdir = pathlib.Path(workdir)
    self.path = self.workdir / LOCK_FILE
    self._fd, self._flocked, self._renewing = None, False, None
    self._created: list[pathlib.Path] = []
    self._stop_renewing = threading.Event()

  def acquire(self) -> None:
    """Takes the lock (creating the workdir), or raises WorkdirError."""
    if self.workdir.exists() and not self.workdir.is_dir():
      raise WorkdirError(f'The workdir {self.workdir} is a file: pass a '
                         'directory (new or of this run) as --workdir.')
    try:
      self._open_and_lock()
      if previous := _holder_in(self._fd):
        self._refuse_if_alive(previous)
        logging.info('Took over %s from %s, which ended without letting go.',
                     self.path, previous.describe())
      since = datetime.datetime.now().astimezone()
      holder = dict(host=socket.gethostname(), pid=os.getpid(),
                    since=since.isoformat(timespec='seconds'))
      os.ftruncate(self._fd, 0)
      os.pwrite(self._fd, json.dumps(holder).encode(), 0)
      os.fsync(self._fd)
    except OSError as e:
      self._let_go()
      raise WorkdirError(
          f'Cannot write to the workdir {self.workdir} ({e.strerror or e}): '
          'pass a --workdir where you can create files.') from e
    self._renewing = threading.Thread(target=self._renew, daemon=True,
                                      name='vit_jax workdir lock')
    self._renewing.start()

  def _open_and_lock(self) -> None:
    # Deepest first, the order to remove them in.
    self._created = [
        d for d in (self.workdir, *self.workdir.parents) if not d.exists()
    ]
    self.workdir.mkdir(parents=True, exist_ok=True)
    while True:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
      try:
        self._flocked = self._lock(fd)
        # A releasing run may have removed the file between open and flock.
        if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
          break
      except FileNotFoundError:
        pass
      except BaseException:
        os.close(fd)
        raise
      os.close(fd)
    self._fd = fd

  def _lock(self, fd: int) -> bool:
    """Whether flock took the lock: False when this filesystem has no locks."""
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return True
    except BlockingIOError:
      holder = _holder_in(fd)
      raise WorkdirError(
          f'The workdir {self.workdir} is in use by another run ('
          f'{holder.describe() if holder else "starting now"}). Wait until '
          'it ends, stop it (SIGTERM saves and stops it), or pass another '
          '--workdir.') from None
    except OSError as e:
      if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
        raise
      logging.warning(
          "%s cannot be locked (%s); relying on its holder's "
          'process id and renewal time alone.', self.path, e.strerror)
      return False

  def _refuse_if_alive(self, holder: Holder) -> None:
    """Refuses a live holder flock cannot see (another host, or no flock)."""
    if holder.host == socket.gethostname():
      # Its own id: a restarted container's run, given the dead one's.
      if (self._flocked or holder.pid == os.getpid() or
          not process_exists(holder.pid)):
        return
      state = 'running'
    else:
      renewed = os.fstat(self._fd).st_mtime
      age = time.time() - renewed
      if age < STALE_SECONDS:
        state = (f'renewed {age:.0f} s ago; if that run is gone, its lock '
                 f'lapses {STALE_SECONDS - age:.0f} s from now')
      elif self._renewed_since(renewed):
        state = (f'renewed within {WATCH_SECONDS:.0f} s, though its time is '
                 f'{age:.0f} s behind this host\'s clock')
      else:
        return
    self._let_go()  # the file stays the holder's
    raise WorkdirError(f'The workdir {self.workdir} is in use by another run '
                       f'({holder.describe()}, {state}). Wait until it ends, '
                       'or pass another --workdir.')

  def _renewed_since(self, renewed: float) -> bool:
    """Whether the lock's time moves from `renewed` within WATCH_SECONDS."""
    logging.info('Watching %s for %.0f s: does its holder renew it?', self.path,
                 WATCH_SECONDS)
    for _ in range(20):
      time.sleep(WATCH_SECONDS / 20)
      try:
        if os.stat(self.path).st_mtime != renewed:
          return True
      except FileNotFoundError:  # its holder let go
        return True
    return False

  def _let_go(self) -> None:
    if self._fd is not None:
      os.close(self._fd)
      self._fd = None

  def _renew(self) -> None:
    while not self._stop_renewing.wait(RENEW_SECONDS):
      try:
        os.utime(self._fd)
      except OSError as e:  # a filesystem gone away: the run will say so
        logging.warning('Cannot renew %s: %s', self.path, e)

  def release(self) -> None:
    """Lets go, removing a workdir it created that holds nothing else."""
    if self._fd is None:
      return
    self._stop_renewing.set()
    if self._renewing is not None:
      self._renewing.join()
    try:  # the workdir may have been removed by hand
      alone = not any(p.name != LOCK_FILE for p in self.workdir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
      alone = False
    if self._created and alone:
      self.path.unlink(missing_ok=True)
      for directory in self._created:
        try:
          directory.rmdir()
        except OSError:  # a parent that holds something else now
          break
    else:
      os.ftruncate(self._fd, 0)  # names no holder: nobody holds it
    self._let_go()  # of the flock too

  def __enter__(self):
    self.acquire()
    return self

  def __exit__(self, *exc_info):
    self.release()

"""SIGTERM and Ctrl-C as requests to stop; a second Ctrl-C exits at once."""

# The standard library only: commands import this before jax, to catch the
# signals from their first line.

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import threading

INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT
STOPPED_EXIT_STATUS = 75  # EX_TEMPFAIL: nothing lost, rerunning resumes

_LIBC = ctypes.CDLL(None)
_NAMES = {signal.SIGTERM: 'SIGTERM', signal.SIGINT: 'Ctrl-C'}
_received: list[str] = []
_previous: dict[int, object] = {}
_jax_sigterm: list = []  # [jax's SIGTERM action] once `hand_on_to_jax`
_training: list[bool] = []  # [True] while a training loop runs
_watching: list = []  # [the previous wake-up fd, reader, writer, thread]
_at_once: list[str] = []  # [what a signal that stops at once did]
_to_remove: list[str] = []  # written by the command, unfinished
_not_stopped = threading.RLock()  # held where a stop would leave a mix


def catch(at_once: str | None = None) -> bool:
  """Records SIGINT and SIGTERM; True if its caller must `release`."""
  if at_once is not None:
    _at_once[:] = [at_once]
  first = not _watching
  if first:
    _watch()
  for signum in _NAMES:  # one the launcher ignores stays ignored
    if signum in _previous or signal.getsignal(signum) != signal.SIG_IGN:
      _previous.setdefault(signum, signal.signal(signum, _wake_the_watcher))
  return first


def release() -> None:
  """Restores the handlers `catch` replaced and forgets what was received."""
  for signum, handler in _previous.items():
    signal.signal(signum, handler)
  if _jax_sigterm:
    _LIBC.sigaction(signal.SIGTERM, _jax_sigterm[0], None)
  if _watching:
    previous_fd, reader, writer, thread = _watching
    signal.set_wakeup_fd(previous_fd)
    writer.close()  # ends the watcher's stream
    thread.join()
    reader.close()
  for state in (_previous, _watching, _received, _jax_sigterm, _training,
                _at_once):
    state.clear()


@contextlib.contextmanager
def at_once_within(done: str):
  """A block that a stop signal ends at once, saying `done`: what it did."""
  before = list(_at_once)
  _at_once[:] = [done]
  try:
    yield
  finally:
    _at_once[:] = before


def stops_at_once() -> bool:
  """Whether `catch(at_once=...)` made the first signal end the process."""
  return bool(_at_once)


def not_stopped_within() -> contextlib.AbstractContextManager:
  """A block (renames that put an output in place) a stop does not cut."""
  return _not_stopped


def hold_renames(timeout: float) -> None:
  """Waits up to `timeout` s for renames to end; no others start after."""
  _not_stopped.acquire(timeout=timeout)  # pylint: disable=consider-using-with


def remove_on_stop(path, remove: bool = True) -> None:
  """Marks `path` unfinished, a stop at once removes it (False: unmarks)."""
  path = os.fspath(path)
  if remove:
    _to_remove.append(path)
  elif path in _to_remove:
    _to_remove.remove(path)


def received() -> str | None:
  """The first stop signal since `catch` ('SIGTERM' or 'Ctrl-C'), or None."""
  return _received[0] if _received else None


def hand_on_to_jax() -> None:
  """Before `catch`: stop signals go on to jax's preemption service too."""
  # Its handler picks the step the job stops at.
  action = ctypes.create_string_buffer(256)  # over struct sigaction's size
  _LIBC.sigaction(signal.SIGTERM, None, action)
  _jax_sigterm[:] = [action]
  if _received:
    _tell_jax()


def _tell_jax() -> None:
  """Runs jax's SIGTERM handler (struct sigaction opens with its address)."""
  address = ctypes.c_void_p.from_buffer(_jax_sigterm[0]).value or 0
  if address > 1:  # neither SIG_DFL nor SIG_IGN
    ctypes.CFUNCTYPE(None, ctypes.c_int)(address)(signal.SIGTERM)


def set_training(training: bool) -> None:
  """Whether a training loop runs, for the first signal's line."""
  _training[:] = [True] if training else []


def _wake_the_watcher(signum, frame):
  """Installed so Python's C handler writes each signal to the wake-up fd."""
  del signum, frame


# A thread woken by Python's wake-up fd reads the signals: Python's handlers run
# between bytecodes, so two Ctrl-Cs in one long compilation would count as one.
def _watch() -> None:
  reader, writer = socket.socketpair()
  writer.setblocking(False)
  previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
  thread = threading.Thread(target=_read_signals, args=(reader,), daemon=True,
                            name='vit_jax stop signals')
  thread.start()
  _watching[:] = [previous_fd, reader, writer, thread]


def _read_signals(reader: socket.socket) -> None:
  # Until `release` closes the writer (recv gives b'') or the socket fails.
  with contextlib.suppress(OSError):
    while signums := reader.recv(64):
      for signum in signums:
        if signum in _previous:
          _on_signal(signum)


def _on_signal(signum: int) -> None:
  if _at_once:
    _not_stopped.acquire()  # never released: the process ends here
    for path in list(_to_remove):
      _remove(path)
    exit_saying(
        f'\n{_NAMES[signum]}: {_at_once[0]}.\n'.encode(),
        INTERRUPTED_EXIT_STATUS
        if signum == signal.SIGINT else STOPPED_EXIT_STATUS)
  if _received and signum == signal.SIGINT:
    exit_saying(
        b'\nerror: Interrupted again: stopped at once, without '
        b'saving; rerun the same command to resume from the newest '
        b'complete checkpoint.\n', INTERRUPTED_EXIT_STATUS)
  if not _received:
    when = ('once the steps in flight are saved'
            if _training else 'before training starts')
    again = ('; press Ctrl-C again to stop at once' +
             (', without saving' if _training else '')
             if signum == signal.SIGINT else '')
    os.write(2, f'\n{_NAMES[signum]}: stopping {when}{again}.\n'.encode())
  _received.append(_NAMES[signum])
  if _jax_sigterm:
    _tell_jax()


def exit_saying(line: bytes, status: int) -> None:
  """Ends the process with `line` last on stderr, later logs going nowhere."""
  try:
    stderr = os.dup(2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os.write(stderr, line)
  finally:  # even without a stderr (`2>&-`)
    os._exit(status)  # pylint: disable=protected-access


def _remove(path: str) -> None:
  """Removes `path`, a few tries: the main thread may still be adding files."""
  for _ in range(5):
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      with contextlib.suppress(OSError):  # gone already, or not ours
        os.unlink(path)
    if not os.path.lexists(path):
      return

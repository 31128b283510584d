"""SIGTERM and Ctrl-C (SIGINT) as requests to stop, caught from the moment a
command starts.

`vit_jax.main` calls `catch()` before it imports anything heavy, so a signal
during start-up is recorded instead of killing the process (status 143 for
SIGTERM, a traceback for Ctrl-C). The first signal only asks, and says so
in one line: the training loop (`preemption.Preemption`) acts on it at a
moment when nothing is half written. A second Ctrl-C exits at once: the
person at the terminal means it. A save it interrupts leaves only orbax's
temporary directory, which the next run removes.

A command with nothing to save (`vit_jax.evaluate`, `convert`, `analyze`,
`benchmark`, `benchmark_input`) calls `catch(at_once=...)` instead: the
first signal ends it at once, with one line that says so, status 130 for
Ctrl-C and 75 for SIGTERM (as training's stops: rerun the same command),
after removing what it was writing and had not finished
(`remove_on_stop`).

A signal the command was started with ignored stays ignored, as Python
leaves it: `nohup cmd &` and a script's background jobs ignore Ctrl-C so
that the Ctrl-C meant for the foreground does not reach them; they are
stopped with SIGTERM.

The signals are watched from a thread of their own, woken by Python's
signal wake-up file descriptor, not by a Python-level handler: those run
only between the main thread's bytecodes, so two Ctrl-Cs during a long
compilation would count as one, acted on when it ends.

Imports nothing but the standard library, so that catching starts early.
"""

import contextlib
import os
import shutil
import signal
import socket
import threading

# A second Ctrl-C's exit status: the shell's for a process ended by SIGINT.
INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT
# The exit status of a command stopped by a signal with nothing lost
# (EX_TEMPFAIL of sysexits.h: a temporary failure; rerunning the command
# resumes): a training run that saved (`preemption`), or a command with
# nothing to save stopped by SIGTERM.
STOPPED_EXIT_STATUS = 75

_NAMES = {signal.SIGTERM: 'SIGTERM', signal.SIGINT: 'Ctrl-C'}
# The first signal's one line, by whether the training loop has started
# (`set_training`): before it there are no steps to save.
_FIRST_NOTICE = {
    (signal.SIGTERM, False): b'SIGTERM: stopping before training starts.\n',
    (signal.SIGINT, False): b'Ctrl-C: stopping before training starts; press '
                            b'Ctrl-C again to stop at once.\n',
    (signal.SIGTERM, True): b'SIGTERM: stopping once the steps in flight are '
                            b'saved.\n',
    (signal.SIGINT, True): b'Ctrl-C: stopping once the steps in flight are '
                           b'saved; press Ctrl-C again to stop at once, '
                           b'without saving.\n',
}

_received: list[str] = []
_previous: dict[int, object] = {}
_forwarding: list[bool] = []  # [True] once `forward_as_sigterm` was called
_training: list[bool] = []  # [True] while a training loop runs
_watching: list = []  # [the previous wake-up fd, reader, writer, thread]
_at_once: list[str] = []  # [what a signal that stops at once did]
_to_remove: list[str] = []  # written by the command, unfinished
_not_stopped = threading.RLock()  # held where a stop would leave a mix
_children: list = []  # processes a stop signal goes on to (`sent_on_to`)
_waited_for = [0]  # open `waited_for` blocks
_children_lock = threading.Lock()


def catch(sigterm: bool = True, at_once: str | None = None) -> bool:
  """Records SIGINT, and SIGTERM unless `sigterm` is False (another handler
  owns it), from now on instead of their defaults; takes them back from a
  handler installed since (jax's, on a single-process job that started
  jax's distributed service). With `at_once` (what stopping does, e.g.
  'stopped the evaluation; nothing was written'), the first signal says it
  and ends the process. Returns True when this call started catching: its
  caller then `release`s them."""
  if at_once is not None:
    _at_once[:] = [at_once]
  first = not _watching
  if first:
    _watch()
  for signum in _NAMES:
    if signum == signal.SIGTERM and not sigterm:
      continue
    if signum not in _previous and (
        signal.getsignal(signum) == signal.SIG_IGN):
      continue  # the launcher's choice
    previous = signal.signal(signum, _wake_the_watcher)
    _previous.setdefault(signum, previous)
  return first


def release() -> None:
  """Gives SIGTERM and SIGINT back their handlers from before `catch`, and
  forgets what was received."""
  for signum, handler in _previous.items():
    signal.signal(signum, handler)
  if _watching:
    previous_fd, reader, writer, thread = _watching
    signal.set_wakeup_fd(previous_fd)
    writer.close()  # the watcher reads the end of the stream, and returns
    thread.join()
    reader.close()
  _previous.clear()
  _watching.clear()
  _received.clear()
  _forwarding.clear()
  _training.clear()
  _at_once.clear()


def stops_at_once() -> bool:
  """Whether `catch(at_once=...)` made the first signal end the process."""
  return bool(_at_once)


@contextlib.contextmanager
def not_stopped_within():
  """A block (the renames that put a finished output in place, a child's
  start) that a stop signal does not cut in two: the signal ends the
  process before it or after it. Blocks may nest."""
  with _not_stopped:
    yield


@contextlib.contextmanager
def sent_on_to(process):
  """A block that waits for `process` (a `subprocess.Popen` of
  `vit_jax.main`: an experiment's training run): a stop signal goes on to
  it as SIGTERM, so that it saves its step, instead of ending this
  process; `received()` then says so, for what follows the block. Catches
  the signals for the block if nothing did; from a thread other than the
  main one (runs side by side), the main thread must have caught them:
  Python lets only it install handlers."""
  main = threading.current_thread() is threading.main_thread()
  started = catch() if main else False
  if not main and not _watching:
    process.kill()  # nothing would pass a stop on to it
    raise RuntimeError('stop_signals.sent_on_to from a thread: call catch() '
                       'in the main thread first.')
  with _children_lock:
    _children.append(process)
    late = bool(_received)
  if late:  # came between its start and here: it would not have heard
    process.send_signal(signal.SIGTERM)
  try:
    yield
  finally:
    with _children_lock:
      _children.remove(process)
    if started:
      release()


@contextlib.contextmanager
def waited_for():
  """A block that a stop signal waits for, as for a child's (`sent_on_to`),
  instead of ending the process at once (`catch(at_once=...)`):
  `received()` says it came, and the block's owner stops once it has
  finished its work. For what ends elsewhere than a child: a run that
  finished but is not yet recorded (`experiments/side_by_side.py`). As
  with a child, the signal is not announced here and a second Ctrl-C does
  not end the process: a block is short."""
  with _children_lock:
    _waited_for[0] += 1
  try:
    yield
  finally:
    with _children_lock:
      _waited_for[0] -= 1


def remove_on_stop(path, remove: bool = True) -> None:
  """A file or directory the command is writing, unfinished: a signal that
  stops the command at once (`catch(at_once=...)`) removes it first.
  `remove=False`: finished, or removed by the command itself."""
  path = os.fspath(path)
  if remove:
    _to_remove.append(path)
  elif path in _to_remove:
    _to_remove.remove(path)


def received() -> str | None:
  """The first stop signal received since `catch` ('SIGTERM' or 'Ctrl-C'),
  or None."""
  return _received[0] if _received else None


def forward_as_sigterm() -> None:
  """For a multi-process job: jax's preemption service, which agrees with
  the other processes on the step to stop at, takes over SIGTERM and
  listens for nothing else. From now on a Ctrl-C is sent on to this process
  as SIGTERM, and a signal that came before the service started is sent on
  now."""
  _forwarding[:] = [True]
  if _received:
    os.kill(os.getpid(), signal.SIGTERM)


def set_training(training: bool) -> None:
  """Whether a training loop runs: a first signal's line then says that
  the steps in flight are saved, not that training will not start."""
  _training[:] = [True] if training else []


def _wake_the_watcher(signum, frame):
  """Python's handler: there to have Python's C-level handler write each
  signal to the wake-up fd; the watcher thread acts on it."""
  del signum, frame


def _watch() -> None:
  reader, writer = socket.socketpair()
  writer.setblocking(False)
  previous_fd = signal.set_wakeup_fd(writer.fileno(),
                                     warn_on_full_buffer=False)
  thread = threading.Thread(target=_read_signals, args=(reader,),
                            daemon=True, name='vit_jax stop signals')
  thread.start()
  _watching[:] = [previous_fd, reader, writer, thread]


def _read_signals(reader: socket.socket) -> None:
  while True:
    try:
      signums = reader.recv(64)
    except OSError:
      return
    if not signums:
      return
    for signum in signums:
      if signum in _previous:
        _on_signal(signum)


def _left_to_the_waiting(signum: int) -> bool:
  """If there are children or `waited_for` blocks: records the stop and
  sends it on to the children as SIGTERM."""
  with _children_lock:  # other threads add and remove theirs
    children = list(_children)
    waiting = bool(children) or _waited_for[0] > 0
    if waiting:
      _received.append(_NAMES[signum])
  for process in children:
    process.send_signal(signal.SIGTERM)
  return waiting


def _on_signal(signum: int) -> None:
  if _left_to_the_waiting(signum):
    return
  if _at_once:
    # A block that must not be cut in two ends first; a child started in
    # one is then among the children (`runs.run_to_its_end`).
    _not_stopped.acquire()
    if _left_to_the_waiting(signum):
      _not_stopped.release()
      return
    # The lock is never released: the process ends here.
    for path in list(_to_remove):
      _remove(path)
    _exit_saying(f'\n{_NAMES[signum]}: {_at_once[0]}.\n'.encode(),
                 INTERRUPTED_EXIT_STATUS if signum == signal.SIGINT else
                 STOPPED_EXIT_STATUS)
  if _received and signum == signal.SIGINT:
    _exit_saying(b'\nerror: Interrupted again: stopped at once, without '
                 b'saving; rerun the same command to resume from the newest '
                 b'complete checkpoint.\n', INTERRUPTED_EXIT_STATUS)
  if not _received:
    os.write(2, b'\n' + _FIRST_NOTICE[signum, bool(_training)])
  _received.append(_NAMES[signum])
  if _forwarding and signum == signal.SIGINT:
    os.kill(os.getpid(), signal.SIGTERM)


def _exit_saying(line: bytes, status: int) -> None:
  """Ends the process with `line` the last thing on its stderr: what the
  main thread logs meanwhile (jax starting up) goes nowhere."""
  try:
    stderr = os.dup(2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os.write(stderr, line)
  finally:  # even without a stderr (`2>&-`)
    os._exit(status)  # pylint: disable=protected-access


def _remove(path: str) -> None:
  """`path` and what is in it, however far its writer got (the command's
  main thread may still be adding files: a few tries)."""
  for _ in range(5):
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      try:
        os.unlink(path)
      except OSError:  # gone already, or not ours to remove
        pass
    if not os.path.lexists(path):
      return

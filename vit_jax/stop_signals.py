"""SIGTERM and Ctrl-C (SIGINT) as requests to stop, caught from the moment a
command starts.

`vit_jax.main` calls `catch()` before it imports anything heavy, so a signal
during start-up is recorded instead of killing the process (status 143 for
SIGTERM, a traceback for Ctrl-C). The first signal only asks: the training
loop (`preemption.Preemption`) acts on it at a moment when nothing is half
written. A second Ctrl-C exits at once: the person at the terminal means it.
A save it interrupts leaves only orbax's temporary directory, which the
next run removes.

Imports nothing but the standard library, so that catching starts early.
"""

import os
import signal

# A second Ctrl-C's exit status: the shell's for a process ended by SIGINT.
INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT

_NAMES = {signal.SIGTERM: 'SIGTERM', signal.SIGINT: 'Ctrl-C'}

_received: list[str] = []
_previous: dict[int, object] = {}
_forwarding: list[bool] = []  # [True] once `forward_as_sigterm` was called


def catch(sigterm: bool = True) -> bool:
  """Records SIGINT, and SIGTERM unless `sigterm` is False (another handler
  owns it), from now on instead of their defaults. Returns False when they
  were caught already (the caller must not `release` them)."""
  if _previous:
    return False
  for signum in _NAMES:
    if signum != signal.SIGTERM or sigterm:
      _previous[signum] = signal.signal(signum, _on_signal)
  return True


def release() -> None:
  """Gives SIGTERM and SIGINT back their handlers from before `catch`, and
  forgets what was received."""
  for signum, handler in _previous.items():
    signal.signal(signum, handler)
  _previous.clear()
  _received.clear()
  _forwarding.clear()


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


def _on_signal(signum, frame):
  del frame
  if _received and signum == signal.SIGINT:
    os.write(2, b'\nerror: Interrupted again: stopped at once, without '
             b'saving; rerun the same command to resume from the newest '
             b'complete checkpoint.\n')
    os._exit(INTERRUPTED_EXIT_STATUS)  # pylint: disable=protected-access
  _received.append(_NAMES[signum])
  if _forwarding and signum == signal.SIGINT:
    os.kill(os.getpid(), signal.SIGTERM)

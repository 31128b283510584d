"""A lost process of a job ends every other one with one line and status 1."""

import contextlib
import ctypes
import faulthandler
import itertools
import os
import signal
import socket
import sys
import threading
import time

from absl import logging
import jax
from jax._src import distributed as jax_distributed
from jax._src.lib import utils as jax_utils

from vit_jax import errors
from vit_jax.runtime import stop_signals

_KEY = 'vit_jax/alive/'
_watching: list[float] = []  # [timeout, period] once watching
_leaving: list[int] = []  # [exit status] once every process is leaving
_answered: list[float] = []  # [when the service last answered the watch]
_said = threading.Lock()  # whoever takes it says the line
_abort_handlers: list = []  # ctypes callbacks must outlive their install


def end_lost(who: str, why: str) -> None:
  """The one line, once no save is halfway through its renames; exit 1."""
  if _leaving:
    os._exit(_leaving[0])  # pylint: disable=protected-access
  if not _said.acquire(blocking=False):
    time.sleep(60)  # another thread says it and ends the process
  stop_signals.hold_renames(timeout=5)
  me, count = jax.process_index(), jax.process_count()
  logging.flush()
  sys.stdout.flush()
  os.write(
      2, f'error: Process {me} of {count} lost {who} of the job ({why}); '
      'see its log for why. The checkpoints saved so far are kept: rerun all '
      'processes to resume.\n'.encode())
  os._exit(1)  # pylint: disable=protected-access


def _coordinator_silence() -> float:
  return time.monotonic() - _answered[0] if _answered else 0


def _too_long(silent: float) -> bool:
  """Past the timeout, or past two beats once a stop is asked for."""
  # A stop request cannot reach a silent peer: this process ends at once.
  timeout, period = _watching
  return silent > timeout or (silent > 2 * period and stop_signals.received())


# A collective on a dead peer may wait for ever, so each process beats in jax's
# coordination service and reads the others' beats on a thread of its own.
def watch(timeout: float) -> None:
  """Beats, and ends this process when a peer has not beaten for `timeout` s."""
  client = jax_distributed.global_state.client
  me, count = jax.process_index(), jax.process_count()
  period = max(0.2, min(1.0, timeout / 10))
  _watching[:] = [timeout, period]

  def beat_and_read():
    last = {peer: (None, time.monotonic()) for peer in range(count)}
    for beat in itertools.count():
      try:
        client.key_value_set(f'{_KEY}{me}', str(beat), allow_overwrite=True)
        beats = dict(client.key_value_dir_get(_KEY))
        _answered[:] = [time.monotonic()]
      except Exception as e:  # pylint: disable=broad-except
        if me == 0 or _leaving:
          return
        end_lost('process 0 (the coordinator)', errors.first_line(e, 160))
      now = time.monotonic()
      for peer in range(count):
        if (value := beats.get(f'{_KEY}{peer}')) != last[peer][0]:
          last[peer] = (value, now)
        elif not _leaving and _too_long(silent := now - last[peer][1]):
          end_lost(f'process {peer}', f'no sign of life for {silent:.0f} s')
      time.sleep(period)

  def judge_the_coordinator():  # the beats may wait on it for ever
    while not _leaving:
      time.sleep(period)
      if _too_long(silent := _coordinator_silence()):
        end_lost('process 0 (the coordinator)', f'no answer for {silent:.0f} s')

  threading.Thread(target=beat_and_read, daemon=True,
                   name='vit_jax peer watch').start()
  if me != 0:
    threading.Thread(target=judge_the_coordinator, daemon=True,
                     name='vit_jax coordinator watch').start()
    _catch_coordinator_abort(jax_distributed.global_state.coordinator_address)


def _catch_coordinator_abort(coordinator_address: str) -> None:
  """Outside process 0: jax's abort on losing process 0 as the line."""
  if logging.get_verbosity() < 1:
    jax_utils.absl_set_min_log_level(4)  # above FATAL
  host, port = coordinator_address.rsplit(':', 1)

  def on_abort(signum):
    del signum
    # A killed process's socket may accept for a while as it dies: ask again.
    deadline = time.monotonic() + 4 * _watching[1] + 1
    while time.monotonic() < deadline:
      if (silent := _coordinator_silence()) > 2 * _watching[1]:
        end_lost('process 0 (the coordinator)', f'no answer for {silent:.0f} s')
      try:
        socket.create_connection((host, int(port)), timeout=1).close()
      except OSError:
        end_lost('process 0 (the coordinator)', 'it refuses connections')
      time.sleep(0.1)
    faulthandler.dump_traceback(all_threads=True)
    os.write(
        2, b"error: jax's runtime aborted; rerun with --verbosity=1 to "
        b'see why.\n')
    os._exit(134)  # pylint: disable=protected-access

  # Through ctypes: jax's `missed_heartbeat_callback` has no Python binding.
  handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int)
  _abort_handlers.append(handler_type(on_abort))
  libc = ctypes.CDLL(None)
  libc.signal.restype = ctypes.c_void_p
  libc.signal.argtypes = [ctypes.c_int, handler_type]
  libc.signal(signal.SIGABRT, _abort_handlers[-1])


def wait_for_all_to_leave(status: int) -> None:
  """Waits up to the timeout for all to be done; a peer that fails fails it."""
  # Watched while it waits, unless stopped (then every process has saved).
  _leaving[:] = [status] if status else []
  client = jax_distributed.global_state.client
  try:
    client.wait_at_barrier('vit_jax: leaving the job', int(_watching[0] * 1000))
  except Exception:  # pylint: disable=broad-except
    end_lost('another process', 'it ended before the job did')
  _leaving[:] = [status]
  # Process 0 serves the barrier: it stays until the others heard it pass.
  with contextlib.suppress(Exception):
    if me := jax.process_index():
      client.key_value_set(f'vit_jax/left/{me}', '')
    for peer in range(1, 1 if me else jax.process_count()):
      client.blocking_key_value_get(f'vit_jax/left/{peer}', 5000)


def await_verdict() -> None:
  """Gives the watch the time to name a lost peer (it ends the process)."""
  if _watching:
    timeout, period = _watching
    time.sleep(timeout + 3 * period)

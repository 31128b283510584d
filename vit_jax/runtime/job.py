"""A command as one process of a multi-process job."""

import sys
from typing import Callable, NoReturn

from absl import flags
from absl import logging
import jax

from vit_jax import errors
from vit_jax.runtime import command
from vit_jax.runtime import distributed
from vit_jax.runtime import peer_watch
from vit_jax.runtime import stop_signals

_COORDINATOR_ADDRESS = flags.DEFINE_string(
    'coordinator_address', None,
    'host:port of process 0 in a multi-process job (default: detected from '
    'SLURM, Open MPI or a Cloud TPU, or $JAX_COORDINATOR_ADDRESS).')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', None, 'Processes in a multi-process job (default: '
    'detected, or $JAX_NUM_PROCESSES); 1 forces a single process.')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', None, "This process's index in 0..num_processes-1 (default: "
    'detected, or $JAX_PROCESS_ID).')
_LOST_PROCESS_TIMEOUT = flags.DEFINE_integer(
    'lost_process_timeout', distributed.DEFAULT_LOST_PROCESS_TIMEOUT,
    'Multi-process jobs: seconds after which the other processes give up on '
    'one that died or hangs, and exit with status 1.')
_JOIN_TIMEOUT = flags.DEFINE_integer(
    'join_timeout', distributed.DEFAULT_JOIN_TIMEOUT,
    'Multi-process jobs: seconds every process has to join the job before '
    'each one that waits exits with status 1.', lower_bound=1)


def exit_job(status: int, every_process_here: bool) -> NoReturn:
  """Ends this process with `status` (`distributed.leave_job` in a job)."""
  if jax.process_count() > 1:
    distributed.leave_job(status, every_process_here)
  sys.exit(status)


def run(work: Callable[[], None], *, cpu_devices: int | None) -> NoReturn:
  """Joins the job (or runs alone), runs `work` and exits."""
  command.quiet_libraries()
  distributed.set_cpu_devices(cpu_devices)
  try:
    if distributed.initialize_distributed(
        _COORDINATOR_ADDRESS.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
        _LOST_PROCESS_TIMEOUT.value, _JOIN_TIMEOUT.value):
      # Every process logs; the prefix tells them apart.
      prefix = f'[process {jax.process_index()}/{jax.process_count()}] '

      def add_prefix(record) -> bool:
        if not str(record.msg).startswith(prefix):
          record.msg = prefix + str(record.msg)
        return True

      logging.get_absl_handler().addFilter(add_prefix)
      if stop_signals.stops_at_once():
        # jax's preemption service took SIGTERM; this command stops at once.
        stop_signals.catch()
    work()
  except (jax.errors.JaxRuntimeError, errors.VitJaxError, OSError) as e:
    if isinstance(e, OSError) and e.filename and errors.out_of_space(e):
      e = errors.VitJaxError(  # a full disk where no checkpoint was saving
          errors.write_failed(e.filename, e, 'every checkpoint saved is kept'))
    if distributed.lost_a_process(e):
      peer_watch.await_verdict()  # a lost peer's line ends this process
      if not isinstance(e, errors.VitJaxError):
        peer_watch.end_lost('another process', errors.first_line(e))
    if not isinstance(e, errors.VitJaxError):
      raise
    logging.flush()  # the error comes last, once
    print(f'error: {e}', file=sys.stderr, flush=True)
    exit_job(1, every_process_here=False)
  exit_job(0, every_process_here=True)

"""Starting, checking and leaving a multi-process job; the CPU's devices."""

from collections.abc import Mapping
import glob
import importlib.util
import os
import sys
import threading
import zlib

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from vit_jax import errors
from vit_jax.errors import DistributedError
from vit_jax.runtime import peer_watch
from vit_jax.runtime import stop_signals

# XLA runs a small model's matmuls on a CPU with little parallelism; batch
# shards on several host devices run side by side
# (experiments/benchmarks/README.md, Attempts).
DEFAULT_CPU_DEVICES = 4
# Seconds before a job gives up on a silent process; jax's defaults are minutes.
DEFAULT_LOST_PROCESS_TIMEOUT = 30
# Seconds every process has to join the job: jax's default wait.
DEFAULT_JOIN_TIMEOUT = 300
# What to do when processes read a folder of the job's otherwise.
SEE_THE_SAME_FILES = ('every host must see the same files there (a shared '
                      'filesystem without stale caches). Start the job again.')


def set_cpu_devices(count: int | None = None):
  """`count` CPU devices unless XLA_FLAGS sets them; call before JAX starts."""
  if 'xla_force_host_platform_device_count' in os.environ.get('XLA_FLAGS', ''):
    return
  jax.config.update('jax_num_cpu_devices', count or DEFAULT_CPU_DEVICES)


def _int_env(environ: Mapping[str, str], name: str) -> int | None:
  if not (value := environ.get(name)):
    return None
  try:
    return int(value)
  except ValueError as e:
    raise DistributedError(f'${name}={value!r} is not an integer.') from e


def _detect_cluster(environ: Mapping[str, str] | None = None) -> str | None:
  """The launcher jax.distributed reads a multi-process setup from, or None."""
  env = os.environ if environ is None else environ
  slurm_vars = ('SLURM_JOB_ID', 'SLURM_STEP_NODELIST', 'SLURM_NTASKS',
                'SLURM_PROCID', 'SLURM_LOCALID')
  if all(name in env for name in slurm_vars):
    tasks = _int_env(env, 'SLURM_STEP_NUM_TASKS') or _int_env(
        env, 'SLURM_NTASKS')
    if tasks and tasks > 1:
      return 'SLURM'
  if 'OMPI_MCA_orte_hnp_uri' in env and (_int_env(env, 'OMPI_COMM_WORLD_SIZE')
                                         or 1) > 1:
    return 'Open MPI'
  hosts = env.get('TPU_PROCESS_ADDRESSES') or env.get('TPU_WORKER_HOSTNAMES')
  # Else a Cloud TPU VM's: libtpu installed, TPU chips attached (accel or VFIO).
  if ((hosts and ',' in hosts) or env.get('MEGASCALE_COORDINATOR_ADDRESS') or
      (environ is None and importlib.util.find_spec('libtpu') is not None and
       bool(glob.glob('/dev/accel[0-9]*') or glob.glob('/dev/vfio/[0-9]*')))):
    return 'Cloud TPU'
  return None


def distributed_args(coordinator_address: str | None = None,
                     num_processes: int | None = None,
                     process_id: int | None = None,
                     environ: Mapping[str, str] | None = None) -> dict | None:
  """`jax.distributed.initialize`'s arguments, or None for one process."""
  env = os.environ if environ is None else environ
  coordinator_address = (coordinator_address or
                         env.get('JAX_COORDINATOR_ADDRESS') or None)
  if num_processes is None:
    num_processes = _int_env(env, 'JAX_NUM_PROCESSES')
  if process_id is None:
    process_id = _int_env(env, 'JAX_PROCESS_ID')
  if num_processes is None and 'OMPI_MCA_orte_hnp_uri' not in env:
    # Open MPI 5 sets no OMPI_MCA_orte_hnp_uri, by which jax detects mpirun:
    # its ranks still say their place; the address is the user's.
    num_processes = _int_env(env, 'OMPI_COMM_WORLD_SIZE')
    if process_id is None:
      process_id = _int_env(env, 'OMPI_COMM_WORLD_RANK')

  if coordinator_address and not coordinator_address.rpartition(
      ':')[2].isdigit():
    raise DistributedError(f'--coordinator_address={coordinator_address} '
                           'needs a port: HOST:PORT, e.g. 10.0.0.1:1234.')
  if num_processes is not None and num_processes < 1:
    raise DistributedError(f'--num_processes={num_processes} must be >= 1.')
  if process_id is not None:
    if num_processes is None:
      raise DistributedError(
          f'--process_id={process_id} needs --num_processes: give both (and '
          '--coordinator_address), or neither inside SLURM, Open MPI or a '
          'Cloud TPU job, which set them.')
    if not 0 <= process_id < num_processes:
      raise DistributedError(
          f'--process_id={process_id} must be in 0..{num_processes - 1} for '
          f'--num_processes={num_processes}.')
  if num_processes == 1:
    return None

  given = dict(coordinator_address=coordinator_address,
               num_processes=num_processes, process_id=process_id)
  cluster = _detect_cluster(environ)
  if all(value is None for value in given.values()):
    return {} if cluster else None
  missing = [f'--{n}' for n, value in given.items() if value is None]
  if cluster is None and missing:
    raise DistributedError(
        'A multi-process job outside SLURM, Open MPI or a Cloud TPU needs '
        '--coordinator_address, --num_processes and --process_id on every '
        'process (or $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, '
        f'$JAX_PROCESS_ID); missing {", ".join(missing)}.')
  return {name: value for name, value in given.items() if value is not None}


def initialize_distributed(
    coordinator_address: str | None = None, num_processes: int | None = None,
    process_id: int | None = None,
    lost_process_timeout: int = DEFAULT_LOST_PROCESS_TIMEOUT,
    join_timeout: int = DEFAULT_JOIN_TIMEOUT) -> bool:
  """Joins the job `distributed_args` asks for, if any; True if it did."""
  kwargs = distributed_args(coordinator_address, num_processes, process_id)
  if kwargs is None:
    return False
  cluster = _detect_cluster()
  described = ', '.join(
      f'{k}={v}' for k, v in kwargs.items()) or (f'detected from {cluster}')
  if cluster != 'Cloud TPU':
    # jax then leaves a lost process to `peer_watch` instead of aborting the
    # survivors with a stack trace. TPU collectives may wait instead of
    # failing.
    jax.config.update('jax_enable_recoverability', True)
  # A stop signal ends the wait at once: nothing is written yet. jax aborts
  # with a native dump when its own wait ends; the watchdog ends ours first.
  logging.info('Joining the multi-process job (%s).', described)
  watchdog = threading.Timer(
      join_timeout, stop_signals.exit_saying,
      (f'error: Not every process joined the multi-process job ({described}) '
       f'within {join_timeout} s: start each with the same reachable '
       '--coordinator_address and --num_processes and its own --process_id, '
       'or raise --join_timeout.\n'.encode(), 1))
  watchdog.start()  # cancelled below, however the join ends
  try:
    with stop_signals.at_once_within('stopped while joining the job; it '
                                     'wrote nothing'):
      jax.distributed.initialize(**kwargs,
                                 initialization_timeout=join_timeout + 60,
                                 heartbeat_timeout_seconds=lost_process_timeout,
                                 shutdown_timeout_seconds=lost_process_timeout)
  except (ValueError, TypeError, RuntimeError) as e:
    raise DistributedError(
        f'Could not join the multi-process job ({described}): {e}') from e
  finally:
    watchdog.cancel()
  peer_watch.watch(lost_process_timeout)
  logging.info('Process %d of %d (%s), %d local device(s) of %d.',
               jax.process_index(), jax.process_count(), described,
               jax.local_device_count(), jax.device_count())
  return True


# How a collective fails when a peer process is gone.
_PEER_LOST = ('UNAVAILABLE', 'DEADLINE_EXCEEDED', 'Connection reset',
              'Connection closed', 'Connection refused', 'heartbeat',
              'Broken pipe')


def lost_a_process(error: BaseException) -> bool:
  """Whether `error`, or an error it came from, says a peer process is gone."""
  return jax.process_count() > 1 and any(sign in str(e)
                                         for e in errors.causes(error)
                                         for sign in _PEER_LOST)


def leave_job(status: int, every_process_here: bool) -> None:
  """Ends this process, after all the others if `every_process_here`."""
  # Not through jax's shutdown, which with recoverability fails the others'.
  if every_process_here:
    peer_watch.wait_for_all_to_leave(status)
  logging.flush()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access


def _checksum(array) -> int:
  array = (np.frombuffer(array.encode(), np.uint8)
           if isinstance(array, str) else np.ascontiguousarray(array))
  crc = zlib.crc32(repr((array.shape, array.dtype.str)).encode())
  return zlib.crc32(memoryview(array).cast('B'), crc)


def check_alike(arrays: list, says: str, error=DistributedError) -> None:
  """`error('Process(es) [i, ...] ' + says)` unless all have process 0's."""
  if jax.process_count() == 1:  # `arrays`, or texts, compared by checksum
    return
  local = np.array([_checksum(a) for a in arrays], np.uint32)
  every = np.asarray(multihost_utils.process_allgather(local))
  if differ := [i for i in range(len(every)) if (every[i] != every[0]).any()]:
    raise error(f'Process(es) {differ} {says}')

"""Process set-up, the mesh and placement, cross-process checks, preemption."""

import os
import signal
import time

import numpy as np
import pytest

from tests import helpers
from vit_jax.runtime import distributed


def test_sets_the_cpu_device_count_unless_an_xla_flag_does(monkeypatch):
  out = helpers.run_python(
      '-c', 'from vit_jax.runtime import distributed; '
      'distributed.set_cpu_devices(3); import jax; print(jax.device_count())',
      env={**os.environ, 'XLA_FLAGS': '', 'JAX_PLATFORMS': 'cpu'}, status=0)
  assert out.stdout.split()[-1] == '3'
  # The default, and a count XLA_FLAGS sets, as jax is told them (this
  # process's devices are fixed already).
  told = []
  monkeypatch.setattr(distributed.jax.config, 'update',
                      lambda *setting: told.append(setting))
  monkeypatch.setenv('XLA_FLAGS', '')
  distributed.set_cpu_devices(None)
  monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=2')
  distributed.set_cpu_devices(3)
  assert told == [('jax_num_cpu_devices', distributed.DEFAULT_CPU_DEVICES)]
  assert distributed.DEFAULT_CPU_DEVICES == 4


# ------------------------------------------------------- multi-process -----

_SLURM_STEP = dict(SLURM_JOB_ID='17', SLURM_STEP_NODELIST='node[01-02]',
                   SLURM_NTASKS='2', SLURM_STEP_NUM_TASKS='2', SLURM_PROCID='1',
                   SLURM_LOCALID='0')
_OPEN_MPI = {'OMPI_MCA_orte_hnp_uri': '1.0;tcp://10.0.0.1:5'}

_SBATCH_SCRIPT_ENVIRON = {
    k: v for k, v in _SLURM_STEP.items()
    if k not in ('SLURM_STEP_NODELIST', 'SLURM_STEP_NUM_TASKS')
}


# A plain single machine; SLURM's one-task job step, its sbatch script itself
# and a job step srun starts (jax detects it all); Open MPI's and a TPU pod's
# jobs, of several processes or one; the JAX_ variables.
@pytest.mark.parametrize('environ,expected', [
    ({}, None),
    ({**_SLURM_STEP, 'SLURM_NTASKS': '1', 'SLURM_STEP_NUM_TASKS': '1'}, None),
    (_SBATCH_SCRIPT_ENVIRON, None), (_SLURM_STEP, {}),
    ({**_OPEN_MPI, 'OMPI_COMM_WORLD_SIZE': '4'}, {}),
    ({**_OPEN_MPI, 'OMPI_COMM_WORLD_SIZE': '1'}, None),
    (dict(OMPI_COMM_WORLD_SIZE='4', OMPI_COMM_WORLD_RANK='2',
          JAX_COORDINATOR_ADDRESS='h:1234'),
     dict(coordinator_address='h:1234', num_processes=4, process_id=2)),
    ({'TPU_WORKER_HOSTNAMES': 'w-0,w-1,w-2,w-3', 'TPU_WORKER_ID': '2'}, {}),
    ({'TPU_WORKER_HOSTNAMES': 'w-0', 'TPU_WORKER_ID': '0'}, None),
    (dict(JAX_COORDINATOR_ADDRESS='h:1234', JAX_NUM_PROCESSES='2',
          JAX_PROCESS_ID='1'),
     dict(coordinator_address='h:1234', num_processes=2, process_id=1))
])
def test_initializes_only_when_the_environment_is_a_multi_process_job(
    environ, expected):
  assert distributed.distributed_args(environ=environ) == expected


def test_flags_win_and_a_single_machine_joins_no_job(monkeypatch):
  flags = dict(coordinator_address='10.0.0.1:8476', num_processes=4,
               process_id=3)
  assert distributed.distributed_args(**flags, environ={}) == flags
  other = {'JAX_COORDINATOR_ADDRESS': 'other:1', 'JAX_PROCESS_ID': '0'}
  assert distributed.distributed_args(**flags, environ=other) == flags
  # Inside SLURM a flag overrides what jax would detect, the rest is detected.
  address = dict(coordinator_address='node01:9999')
  assert distributed.distributed_args(**address, environ=_SLURM_STEP) == address
  # One process is one process, whatever the environment says.
  assert distributed.distributed_args(num_processes=1,
                                      environ=_SLURM_STEP) is None
  # A single machine joins no job and differs from no other.
  for name in list(os.environ):
    if name.startswith(('SLURM_', 'OMPI_', 'TPU_', 'MEGASCALE_', 'JAX_')):
      monkeypatch.delenv(name)
  assert not distributed.initialize_distributed()
  with pytest.raises(distributed.DistributedError,
                     match='needs --num_processes'):
    distributed.initialize_distributed(process_id=0)
  distributed.check_alike([np.arange(3)], 'never raised')


@pytest.mark.parametrize('flags,environ,message', [
    (dict(process_id=1), {}, r'--process_id=1 needs --num_processes'),
    (dict(process_id=1), _SLURM_STEP, r'--process_id=1 needs --num_processes'),
    (dict(num_processes=2, process_id=2), {}, r'must be in 0\.\.1'),
    (dict(num_processes=0), {}, r'--num_processes=0 must be >= 1'),
    (dict(num_processes=2, process_id=0), {},
     r'needs --coordinator_address.*missing --coordinator_address\.$'),
    (dict(coordinator_address='h:1'), {},
     r'missing --num_processes, --process_id'),
    ({}, {'JAX_COORDINATOR_ADDRESS': 'h:1'
         }, r'missing --num_processes, --process_id'),
    ({}, {'JAX_NUM_PROCESSES': 'two'}, r"\$JAX_NUM_PROCESSES='two' is not"),
    (dict(coordinator_address='127.0.0.1', num_processes=2, process_id=0), {},
     r'--coordinator_address=127\.0\.0\.1 needs a port: HOST:PORT'),
])
def test_an_incomplete_or_impossible_set_is_a_clear_error(
    flags, environ, message):
  with pytest.raises(distributed.DistributedError, match=message):
    distributed.distributed_args(**flags, environ=environ)


@pytest.mark.parametrize('join_timeout,stop,status,last_line', [
    (60, True, 75, 'SIGTERM: stopped while joining the job; it wrote nothing.'),
    (3, False, 1, 'its own --process_id, or raise --join_timeout.'),
])
def test_a_job_that_never_gathers_ends_at_a_stop_signal_or_its_join_timeout(
    tmp_path, join_timeout, stop, status, last_line):
  log = tmp_path / 'process_0.log'
  # Process 1 never starts.
  process = helpers.start_main(
      'configs/cifar_small.py', tmp_path / 'run', log, '--num_processes=2',
      '--process_id=0',
      f'--coordinator_address=127.0.0.1:{helpers.free_port()}',
      f'--join_timeout={join_timeout}')
  try:
    helpers.wait_until(
        lambda: 'Joining the multi-process job' in log.read_text(), 60, process,
        log.read_text)
    if stop:
      time.sleep(1)  # inside jax's wait for process 1
      process.send_signal(signal.SIGTERM)
    status_seen = process.wait(timeout=20)
  finally:
    process.kill()
    process.wait()
  assert status_seen == status, log.read_text()
  assert log.read_text().rstrip().endswith(last_line), log.read_text()
  assert not (tmp_path / 'run').exists()

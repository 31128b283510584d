"""What a command that runs as one process of a multi-process job does around
its work, shared by `vit_jax.main` and `vit_jax.evaluate`: its flags parsed
(a --config file that cannot be loaded is one line), the flags that say who
is who, joining the job (or running alone), telling the processes' logs
apart, and ending so that no process waits on one that is gone.

SLURM, Open MPI and Cloud TPU jobs are detected (`distributed`); elsewhere
--coordinator_address, --num_processes and --process_id, or $JAX_*, say
who is who. Imported by commands only: the flags are global to a process.
"""

import logging as python_logging
import pathlib
import sys
import traceback
from typing import Callable, NoReturn

from absl import flags
from absl import logging
import jax
import ml_collections
from ml_collections import config_flags

from vit_jax import distributed
from vit_jax import errors

_COORDINATOR_ADDRESS = flags.DEFINE_string(
    'coordinator_address', None,
    'host:port of process 0 in a multi-process job (default: detected from '
    'SLURM, Open MPI or a Cloud TPU, or $JAX_COORDINATOR_ADDRESS).')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', None,
    'Processes in a multi-process job (default: detected, or '
    '$JAX_NUM_PROCESSES); 1 forces a single process.')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', None,
    "This process's index in 0..num_processes-1 (default: detected, or "
    '$JAX_PROCESS_ID).')
_LOST_PROCESS_TIMEOUT = flags.DEFINE_integer(
    'lost_process_timeout', distributed.DEFAULT_LOST_PROCESS_TIMEOUT,
    'Multi-process jobs: seconds after which the other processes give up on '
    'one that died or hangs, and exit with status 1.')


def _config_files(argv: list[str]) -> set[str]:
  """The resolved paths the --config flags of `argv` name."""
  values = [arg.split('=', 1)[1] for arg in argv if arg.startswith('--config=')]
  values += [after for arg, after in zip(argv, argv[1:]) if arg == '--config']
  return {str(pathlib.Path(value.split(':')[0]).resolve()) for value in values}


def _config_file_problem(error: BaseException, argv: list[str]) -> str | None:
  """What is wrong with the --config file, if `error` (raised while the
  flags were parsed) came from loading it: missing, not Python, or raising
  (ml_collections wraps what it raised, and the innermost traceback runs
  through the file); None for another error."""
  files = _config_files(argv)
  innermost = error
  while innermost.__cause__ or innermost.__context__:
    innermost = innermost.__cause__ or innermost.__context__
  if 'Failed loading config file' in str(error):
    return 'no file ' + ', '.join(sorted(files))
  if (isinstance(innermost, SyntaxError) and innermost.filename and
      str(pathlib.Path(innermost.filename).resolve()) in files):
    return (f'{innermost.filename}, line {innermost.lineno}: '
            f'{innermost.msg}; fix the file.')
  frames = [frame for frame in traceback.extract_tb(innermost.__traceback__)
            if str(pathlib.Path(frame.filename).resolve()) in files]
  if not frames:
    return None
  if isinstance(innermost, ValueError):  # the file's own refusal
    return str(innermost)
  return (f'{frames[-1].filename}, line {frames[-1].lineno}: '
          f'{errors.first_line(innermost)}')


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing for a command; a bad flag, or a --config file
  that is missing, is not Python or raises, is one `error:` line and exit
  status 1 instead of a traceback, with or without --config.FIELD
  overrides. An override of a field the config lacks,
  `--config.num_epoch=3`, is accepted here and named by the config schema
  or the model."""
  try:
    remaining = flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    # ml_collections lets whatever loading the file raised through.
    problem = _config_file_problem(e, argv)
    if problem is not None:
      sys.exit(f'error: --config cannot be loaded: {problem}')
    if not isinstance(e, flags.Error):
      raise
    sys.exit(f'error: {e}\nPass --helpshort or --helpfull to see help on '
             'flags.')
  # A config file that is missing, without overrides, stands in as an
  # object that raises when used, not as a ConfigDict.
  config = flags.FLAGS['config'].value if 'config' in flags.FLAGS else None
  if config is not None and not isinstance(config, ml_collections.ConfigDict):
    sys.exit('error: --config cannot be loaded: no file '
             f'{config_flags.get_config_filename(flags.FLAGS["config"])}')
  return remaining


class _ProcessPrefix(python_logging.Filter):
  """Starts every log line with `[process i/n] ` in a multi-process job."""

  def __init__(self, prefix: str):
    super().__init__()
    self._prefix = prefix

  def filter(self, record) -> bool:
    if not str(record.msg).startswith(self._prefix):
      record.msg = self._prefix + str(record.msg)
    return True


def exit_job(status: int, every_process_here: bool) -> NoReturn:
  """Ends this process with `status`; in a multi-process job without jax's
  shutdown (`distributed.leave_job`), after waiting for the others when
  `every_process_here` (they all end this way)."""
  if jax.process_count() > 1:
    distributed.leave_job(status, every_process_here)
  sys.exit(status)


def run(work: Callable[[], None], *, cpu_devices: int | None) -> NoReturn:
  """Joins the job the flags or the environment describe (or runs alone),
  runs `work`, and exits: 0 when it returned; 1 after one `error:` line
  for a problem the message explains (`VitJaxError`) or a lost process.
  `cpu_devices`: host devices on a CPU (default:
  `distributed.DEFAULT_CPU_DEVICES`)."""
  distributed.set_cpu_devices(cpu_devices)
  try:
    if distributed.initialize_distributed(
        _COORDINATOR_ADDRESS.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
        _LOST_PROCESS_TIMEOUT.value):
      # Every process logs, as in flax's and big_vision's trainers; the
      # prefix tells them apart.
      logging.get_absl_handler().addFilter(_ProcessPrefix(
          f'[process {jax.process_index()}/{jax.process_count()}] '))
    work()
  except jax.errors.JaxRuntimeError as e:
    if not distributed.lost_a_process(e):
      raise
    distributed.abandon_job(e)
  except errors.VitJaxError as e:
    logging.flush()  # the error comes last, once
    print(f'error: {e}', file=sys.stderr, flush=True)
    exit_job(1, every_process_here=False)
  exit_job(0, every_process_here=True)

"""Trains and evaluates a model: `python -m vit_jax.main --config=... --workdir=...`.

Rerunning the same command resumes from the latest checkpoint in the workdir.
Exit status: 0 when the run is complete; 75 when SIGTERM or Ctrl-C stopped
it with nothing lost (rerun to resume); 1 for a problem the message explains;
130 when a second Ctrl-C stopped it at once (rerun to resume from the newest
complete checkpoint).
On several hosts the same command runs once per host (or per accelerator),
with the workdir on a shared filesystem; SLURM, Open MPI and Cloud TPU jobs are
detected, elsewhere --coordinator_address, --num_processes and --process_id say
who is who (README.md, "Multi-host").
"""

# pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax import stop_signals

if __name__ == '__main__':
  # First, before jax and the rest load (a second or more): a SIGTERM or
  # Ctrl-C from now on is a request to stop, acted on as the run allows,
  # not a kill with status 143 or a traceback.
  stop_signals.catch()

import logging as python_logging
import pathlib
import sys
import traceback

from absl import app
from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from vit_jax import distributed
from vit_jax import job
from vit_jax import preemption
from vit_jax import train

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Training configuration file, e.g. configs/cifar_small.py.',
    # Any field may be overridden, a model's too; the schema and the model
    # name the ones that do not exist.
    lock_config=False, accept_new_attributes=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and the config.')
_CPU_DEVICES = flags.DEFINE_integer(
    'cpu_devices', None,
    'Host devices the batch is split over when running on the CPU (default: '
    f'config.cpu_devices, else {distributed.DEFAULT_CPU_DEVICES}).')
flags.mark_flags_as_required(['config', 'workdir'])


def _quiet_orbax(record) -> bool:
  # Orbax logs every step of every save at INFO, drowning the progress lines.
  # A save that fails logs its error with a traceback from every background
  # thread involved; the loop reports it once, in one line (CheckpointError).
  background = '/orbax/' in record.pathname or record.name == 'asyncio'
  if not background:
    return True
  return (record.levelno >= python_logging.WARNING and
          not (record.levelno >= python_logging.ERROR and record.exc_info))


def _raised_by_config_file(error: BaseException,
                           argv: list[str]) -> BaseException | None:
  """The exception the --config file itself raised, if `error` came from
  one: ml_collections wraps it twice, and the traceback of the innermost
  exception runs through the config file."""
  values = [arg.split('=', 1)[1] for arg in argv if arg.startswith('--config=')]
  values += [after for arg, after in zip(argv, argv[1:]) if arg == '--config']
  config_files = {str(pathlib.Path(value.split(':')[0]).resolve())
                  for value in values}
  innermost = error
  while innermost.__cause__ or innermost.__context__:
    innermost = innermost.__cause__ or innermost.__context__
  frames = traceback.extract_tb(innermost.__traceback__)
  if any(str(pathlib.Path(frame.filename).resolve()) in config_files
         for frame in frames):
    return innermost
  return None


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; a bad flag or a config file that does not load is
  one line instead of a traceback. An override of a field the config lacks,
  `--config.num_epoch=3` or `--config.model_overrides.num_layerz=1`, is
  accepted here and named by the config schema or the model."""
  try:
    remaining = flags.FLAGS(argv)
  except flags.Error as e:
    raised = _raised_by_config_file(e, argv)
    if raised is not None:
      sys.exit(f'error: --config cannot be loaded: {raised}')
    sys.exit(f'error: {e}\nPass --helpshort or --helpfull to see help on '
             'flags.')
  # A config file that is missing stands in as an object that raises when
  # used, not as a ConfigDict.
  if not isinstance(_CONFIG.value, ml_collections.ConfigDict):
    path = config_flags.get_config_filename(flags.FLAGS['config'])
    sys.exit(f'error: --config cannot be loaded: no file {path}')
  return remaining


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  logging.get_absl_handler().addFilter(_quiet_orbax)
  config = _CONFIG.value

  def work():
    try:
      train.train_and_evaluate(config, _WORKDIR.value)
    except preemption.Preempted as e:
      logging.warning('%s', e)
      job.exit_job(preemption.PREEMPTED_EXIT_STATUS, every_process_here=True)

  # Only process 0 writes files (train.py).
  job.run(work, cpu_devices=_CPU_DEVICES.value or config.get('cpu_devices'))


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)

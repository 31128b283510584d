"""Trains and evaluates a model: `python -m vit_jax.main --config=... --workdir=...`.

Rerunning the same command resumes from the latest checkpoint in the workdir.
"""

import logging as python_logging
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from vit_jax import input_pipeline
from vit_jax import runtime
from vit_jax import train

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Training configuration file, e.g. configs/cifar_small.py.',
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and the config.')
_CPU_DEVICES = flags.DEFINE_integer(
    'cpu_devices', None,
    'Host devices the batch is split over when running on the CPU (default: '
    f'config.cpu_devices, else {runtime.DEFAULT_CPU_DEVICES}).')
flags.mark_flags_as_required(['config', 'workdir'])


def _quiet_orbax(record) -> bool:
  # Orbax logs every step of every save at INFO, drowning the progress lines.
  return (record.levelno >= python_logging.WARNING or
          '/orbax/' not in record.pathname)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  logging.get_absl_handler().addFilter(_quiet_orbax)
  runtime.set_cpu_devices(_CPU_DEVICES.value or
                          _CONFIG.value.get('cpu_devices'))
  try:
    train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (train.ConfigError, input_pipeline.DatasetError,
          train.TrainingDivergedError) as e:
    logging.error('%s', e)
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  app.run(main)

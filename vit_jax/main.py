r"""Trains and evaluates a model; the same command again resumes the run.

  python -m vit_jax.main --config=configs/cifar_small.py --workdir=/tmp/vit_tiny
  python -m vit_jax.main --config=configs/cifar_small.py --workdir=/tmp/vit \
      --config.num_epochs=1 --config.data_dir=DIR

--config.FIELD=VALUE sets any field of the config, and
--config.model_overrides.FIELD=VALUE any field of the model: every field, its
default and what it means are in vit_jax/config_schema.py (docs/training.md).

Exit status: 0 when the run is complete; 75 when SIGTERM or Ctrl-C stopped
it with nothing lost (rerun to resume); 1 for a problem the message explains;
130 when a second Ctrl-C stopped it at once (rerun to resume from the newest
complete checkpoint). Several hosts: docs/multi_host.md."""

# pylint: disable=g-import-not-at-top,wrong-import-position
import sys

from vit_jax.runtime import stop_signals

if __name__ == '__main__':
  # Before jax loads (a second or more): a SIGTERM or Ctrl-C from now on is
  # a request to stop, not a kill with status 143 or a traceback.
  stop_signals.catch()

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from vit_jax.runtime import command
from vit_jax.runtime import job
from vit_jax.runtime import preemption
from vit_jax.training import train

# Unlocked, accepting new attributes: any field may be overridden, a model's
# too; the schema and the model name the ones that do not exist.
_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Training configuration file, e.g. configs/cifar_small.py; '
    '--config.FIELD=VALUE overrides a field.', lock_config=False,
    accept_new_attributes=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and the config.')
_CPU_DEVICES = command.define_shared_flags('cpu_devices')[0]
flags.adopt_module_key_flags(job)
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {" ".join(argv[1:])}; every '
             'argument is a flag (--workdir=DIR, --config.FIELD=VALUE).')
  config = _CONFIG.value
  if _CPU_DEVICES.value:  # what the run uses, as config.json records it
    config.cpu_devices = _CPU_DEVICES.value

  def work():
    try:
      train.train_and_evaluate(config, _WORKDIR.value)
    except preemption.Preempted as e:
      logging.warning('%s', e)
      job.exit_job(preemption.PREEMPTED_EXIT_STATUS, every_process_here=True)

  # Only process 0 writes files (train.py).
  job.run(work, cpu_devices=config.get('cpu_devices'))


if __name__ == '__main__':
  app.run(main, flags_parser=command.parse_flags)

r"""Measures a checkpoint's loss, top-1 and top-5 accuracy over a whole split.

  python -m vit_jax.evaluate --checkpoint=/tmp/vit_tiny
  python -m vit_jax.evaluate --checkpoint=vit_small.npz \
      --config=configs/cifar_small.py --data_dir=DIR
  python -m vit_jax.evaluate --checkpoint=hf_vit/ \
      --config=configs/image_folder.py --data_dir=DIR --released_preprocessing

A workdir is evaluated with its run's config unless --config names another;
--config.FIELD=VALUE overrides a field of either. Other checkpoints need
--config, which names the dataset; such a checkpoint computes in config.dtype
and needs config.image_size to be what its position embeddings were trained
for, or --released_preprocessing. Process 0 prints the result, its last line
JSON: top1, top5, loss, examples and what was evaluated (docs/checkpoints.md).
Exit status 0; 1 after one `error:` line; 75 or 130 when SIGTERM or Ctrl-C
stopped it."""

# pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax.runtime import stop_signals

if __name__ == '__main__':
  # Before jax loads: Ctrl-C or SIGTERM stop it at once, whatever it does.
  stop_signals.catch(at_once='stopped the evaluation; it wrote nothing')

import json

from absl import app
from absl import flags
import jax
from ml_collections import config_flags

from vit_jax.checkpoints import reading
from vit_jax.checkpoints import workdir_config
from vit_jax.runtime import command
from vit_jax.runtime import files
from vit_jax.runtime import job
from vit_jax.training import evaluation

_CHECKPOINT, _MODEL, _STEP, _DATA_DIR = command.define_shared_flags(
    'checkpoint', 'model', 'step', 'data_dir')
_CONFIG = config_flags.DEFINE_config_file(
    'config', None,
    "The dataset and preprocessing, e.g. configs/cifar_small.py "
    "(default for a workdir: its run's config).", lock_config=False,
    accept_new_attributes=True)  # the schema names a field that is not one
_RELEASED_PREPROCESSING = flags.DEFINE_bool(
    'released_preprocessing', False, 'Preprocess as the checkpoint '
    'expects: the resolution of its position embeddings, the mean and std '
    'its folder states (pixels in [-1, 1] where none).')
_SPLIT = flags.DEFINE_enum(
    'split', 'test', ['test', 'validation'],
    'The split to evaluate: validation needs config.validation_examples.')
_CLASS_HEAD = flags.DEFINE_bool(
    'class_head', False, "A distilled ViT's class head alone, not the "
    'average of its two heads that it predicts with.')
_CPU_DEVICES = command.define_shared_flags('cpu_devices')[0]
flags.adopt_module_key_flags(job)
flags.mark_flag_as_required('checkpoint')


def main(argv):
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {" ".join(argv[1:])}; '
                     'pass the checkpoint as --checkpoint=SOURCE.')
  config = _CONFIG.value

  def work():
    result = evaluation.evaluate(
        _CHECKPOINT.value, config=config, model_name=_MODEL.value,
        step=_STEP.value, data_dir=_DATA_DIR.value,
        released_preprocessing=_RELEASED_PREPROCESSING.value,
        split=_SPLIT.value, class_head=_CLASS_HEAD.value)
    if jax.process_index() == 0:
      print(f'top-1 {100 * result["top1"]:.2f}%, top-5 '
            f'{100 * result["top5"]:.2f}%, loss {result["loss"]:.4f} over '
            f'{result["examples"]} {result["split"]} examples')
      print(json.dumps(result), flush=True)

  if config is not None:
    cpu_devices = config.get('cpu_devices')
  else:  # a workdir's own config, read before JAX picks its devices
    saved, _ = files.read_json(
        reading.run_directory(_CHECKPOINT.value) / 'config.json')
    cpu_devices = saved.get('cpu_devices') if isinstance(saved, dict) else None
  job.run(work, cpu_devices=_CPU_DEVICES.value or cpu_devices)


def _parse_flags(argv: list[str]) -> list[str]:
  """`command.parse_flags`; overrides without --config: the workdir's own."""
  checkpoint = [  # --checkpoint=DIR or --checkpoint DIR
      a.split('=', 1)[1] for a in argv if a.startswith('--checkpoint=')
  ] + [value for a, value in zip(argv, argv[1:]) if a == '--checkpoint']
  if (checkpoint and any(a.startswith('--config.') for a in argv) and
      not any(a == '--config' or a.startswith('--config=') for a in argv) and
      (reading.run_directory(checkpoint[-1]) / 'checkpoints').is_dir()):
    config_flag = f'--config={workdir_config.__file__}:{checkpoint[-1]}'
    argv = [argv[0], config_flag, *argv[1:]]
  return command.parse_flags(argv)


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)

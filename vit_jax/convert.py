r"""Converts a ViT checkpoint between our, the official, timm and HF formats.

  python -m vit_jax.convert SOURCE DEST --format=npz|timm|hf [--model=NAME]

SOURCE is any checkpoint, told from its contents: a `vit_jax.main` workdir,
an official `.npz`, a timm `model.safetensors` or hub folder, or a
transformers ViT folder. DEST is written in --format:

  npz    the official google-research/vision_transformer `.npz`
  timm   a folder for `timm.create_model('local-dir:DEST', pretrained=True)`
  hf     a folder for
         `transformers.ViTForImageClassification.from_pretrained(DEST)`

`vit_jax.checkpoints.export` writes them (docs/checkpoints.md). DEST is
replaced whole: after a failure or Ctrl-C it holds the old file or folder.
Exit status 0; 1 after one `error:` line (a full disk included); 130 or 75
after Ctrl-C or SIGTERM."""

# pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax.runtime import stop_signals

if __name__ == '__main__':
  # Before jax loads: Ctrl-C or SIGTERM stop it at once, whatever it does.
  stop_signals.catch(at_once='stopped the conversion; DEST is as it was')

from absl import app
from absl import flags

from vit_jax import errors
from vit_jax.checkpoints import export
from vit_jax.runtime import command

_FORMAT = flags.DEFINE_enum('format', None, export.FORMATS,
                            'What DEST is written as.')
_MODEL, _STEP = command.define_shared_flags('model', 'step')


def main(argv):
  if len(argv) != 3 or _FORMAT.value is None:
    raise SystemExit('error: pass SOURCE, DEST and --format: python -m '
                     'vit_jax.convert SOURCE DEST --format=npz|timm|hf '
                     '[--model=NAME]')
  command.quiet_libraries()
  print(
      errors.exit_on_user_error(lambda: export.convert(argv[1], argv[
          2], _FORMAT.value, model_name=_MODEL.value, step=_STEP.value)))


if __name__ == '__main__':
  app.run(main, flags_parser=command.parse_flags)

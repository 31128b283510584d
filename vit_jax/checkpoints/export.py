"""Any checkpoint written in another format (`python -m vit_jax.convert`)."""

import pathlib

import jax

from vit_jax import errors
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib
from vit_jax.formats import vit_model
from vit_jax.runtime import files

FORMATS = (reading.NPZ, *reading.FOLDER_FORMATS)


def _check_destination(dest: pathlib.Path, format_name: str) -> None:
  if format_name == 'npz':
    if dest.is_dir() or dest.suffix != '.npz':
      such = dest / 'model.npz' if dest.is_dir() else dest.with_suffix('.npz')
      raise CheckpointError(f'{dest} is not an .npz path; --format=npz writes '
                            f'one: pass a path such as {such}.')
    return
  if dest.is_file():
    raise CheckpointError(f'{dest} is a file; --format={format_name} writes a '
                          'folder: pass a new or empty directory.')
  if (dest / 'checkpoints').exists():
    raise CheckpointError(f'{dest} is a vit_jax.main workdir, whose '
                          'config.json the export would overwrite: pass a new '
                          'or empty directory.')
  # The new folder takes the old one's place whole: only an earlier
  # export's files may be there.
  if others := files.foreign_files(
      dest, reading.FOLDER_FORMATS[format_name].FILES.__contains__):
    raise CheckpointError(
        f'{dest} holds files a {format_name} folder does not ({others}), '
        'which the export would replace: pass a new or empty directory.')


def convert(source: str | pathlib.Path, dest: str | pathlib.Path,
            format_name: str, *, model_name: str | None = None,
            step: int | None = None) -> str:
  """Writes `source` as `dest` in `format_name`; returns one line saying so."""
  if format_name not in FORMATS:
    raise CheckpointError(f'--format={format_name!r}: use one of '
                          f'{", ".join(FORMATS)}.')
  dest = pathlib.Path(dest)
  _check_destination(dest, format_name)
  loaded = reading.load(source, model_name=model_name, step=step)
  if not isinstance(loaded.model, models.VisionTransformer):
    raise CheckpointError(f'{source} holds a {loaded.config.model}; only ViTs '
                          'convert to other formats.')
  params = jax.device_get(loaded.params)
  try:
    if format_name == 'npz':
      vit_model.check_exportable(loaded.model, 'npz',
                                 vit_model.npz_lacks(loaded.model))
      npz.save_npz(params, dest)
    else:
      files.replace_directory_atomically(
          dest, lambda partial: reading.FOLDER_FORMATS[format_name].write(
              partial, params, loaded.model, loaded.image_size, loaded.pixels,
              loaded.class_names))
  except errors.VitJaxError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # A full or read-only disk: OSError, or safetensors' own error.
    kept = f'the {"file" if format_name == "npz" else "folder"} is as it was'
    raise CheckpointError(errors.write_failed(dest, e, kept,
                                              'another DEST')) from e
  described = params_lib.describe_architecture(
      params_lib.vit_architecture(params))
  line = (f'Wrote {dest} ({format_name}): {described}, '
          f'{loaded.model.num_classes} classes, {loaded.image_size}x'
          f'{loaded.image_size} images; from the {loaded.kind} {source}'
          f'{f" (step {loaded.step})" if loaded.step is not None else ""}.')
  if format_name == reading.NPZ and loaded.pixels != vit_model.RELEASED_PIXELS:
    line += (' An .npz does not hold the normalization it was trained with: '
             f'evaluate or fine-tune it with '
             f'{reading.pixel_flags(loaded.pixels)}; analyze {source} instead.')
  return line

"""Any checkpoint read back: a run as trained (`load_run`), or any (`load`)."""

import dataclasses
import pathlib
from typing import Any

from absl import logging
import jax
import ml_collections

from vit_jax import formats
from vit_jax import models
from vit_jax.checkpoints import best_checkpoint
from vit_jax.checkpoints import run_checkpoints
from vit_jax.errors import CheckpointError
from vit_jax.errors import WorkdirError
from vit_jax.formats import hf
from vit_jax.formats import npz
from vit_jax.formats import safetensors_file
from vit_jax.formats import timm
from vit_jax.formats import vit_model
from vit_jax.models import names
from vit_jax.runtime import files

# Written beside a run's config.json: a JSON list, label i's name at [i]
# (JSON escapes a name's line breaks and undecodable bytes).
CLASS_NAMES_FILE = 'classes.json'


@dataclasses.dataclass(frozen=True)
class Run:
  config: ml_collections.ConfigDict
  params: Any
  batch_stats: Any  # {} for models without BatchNorm
  step: int
  position: dict  # the input's at `step`: what it trained on and held out

  @property
  def variables(self) -> dict:
    return models.model_variables(self.params, self.batch_stats)


def class_names(workdir: pathlib.Path) -> tuple[str, ...]:
  """The names of the classes a run trained on, where its data named them."""
  names, _ = files.read_json(pathlib.Path(workdir) / CLASS_NAMES_FILE)
  return tuple(map(str, names)) if isinstance(names, list) else ()


def saved_config(workdir: pathlib.Path) -> dict:
  """`workdir`'s config.json, else rebuilt from its newest checkpoint."""
  saved, problem = files.read_json(workdir / 'config.json')
  if saved is not None:
    return saved
  config_file, checkpoints = workdir / 'config.json', workdir / 'checkpoints'
  with run_checkpoints.RunCheckpoints(checkpoints) as reader:
    found = reader.latest_config()
  if found is None:
    raise WorkdirError(
        f'{config_file} {problem}, and the checkpoints in {checkpoints} hold '
        'no config of their own: nothing says which config they are of, so '
        'no run can resume them. Pass a new --workdir, or move '
        f'{checkpoints} away to start afresh here.')
  step, saved = found
  logging.warning('%s %s: rebuilt from the config saved with checkpoint %s.',
                  config_file, problem, checkpoints / str(step))
  if jax.process_index() == 0:
    files.write_json(config_file, saved, indent=2)
  return saved


def _names_best(path: pathlib.Path) -> bool:
  return (path.name == best_checkpoint.DIRECTORY and
          (path.parent / 'checkpoints').is_dir())


def run_directory(source: str | pathlib.Path) -> pathlib.Path:
  """The workdir of a run source, itself or its best_checkpoint's."""
  path = pathlib.Path(source)
  return path.parent if _names_best(path) else path


def load_run(workdir: str | pathlib.Path, step: int | None = None,
             best: bool = False) -> Run:
  """A workdir's checkpoint of `step`, else its newest sound one or best."""
  workdir = pathlib.Path(workdir)
  if _names_best(workdir):
    workdir, best = workdir.parent, True
  if best and step is not None:
    raise CheckpointError(f'{workdir}: pass a step or its best checkpoint, '
                          'not both.')
  directory = workdir / (best_checkpoint.DIRECTORY if best else 'checkpoints')
  with run_checkpoints.RunCheckpoints(directory) as checkpoints:
    if not checkpoints.steps():
      if best and (workdir / 'checkpoints').is_dir():
        raise CheckpointError(
            f'{workdir} kept no best checkpoint ({directory} holds none): '
            'its run trained without --config.keep_best_checkpoint=True, or '
            'has not evaluated since it was set (a finished run must be '
            'trained again). A teacher is read at its newest checkpoint '
            'with --config.teacher_checkpoint=last.')
      if not (workdir / 'config.json').exists():
        raise CheckpointError(f'{workdir} has no config.json nor checkpoints: '
                              'pass the workdir of a run of `python -m '
                              'vit_jax.main`.')
      raise CheckpointError(f'{workdir / "checkpoints"} holds no checkpoint '
                            'yet; train until the first one is saved.')
    restored = (checkpoints.restore_latest()
                if step is None else checkpoints.restore(step))
  config, problem = files.read_json(workdir / 'config.json')
  if config is None:
    if restored.config is None:
      raise CheckpointError(
          f'{workdir / "config.json"} {problem}, and the checkpoints in '
          f'{checkpoints.directory} hold no config of their own: nothing '
          "says which model they are. Put back the run's config.json.")
    logging.warning('%s %s: reading the config saved with checkpoint %s.',
                    workdir / 'config.json', problem,
                    checkpoints.directory / str(restored.step))
    config = restored.config
  # The model is the parameters' moving average where the run kept one.
  device = jax.local_devices()[0]
  params = restored.state.get('ema_params') or restored.state['params']
  return Run(ml_collections.ConfigDict(config), jax.device_put(params, device),
             jax.device_put(restored.state.get('batch_stats') or {}, device),
             restored.step, restored.position)


# As `vit_jax.convert --format` names them.
WORKDIR, NPZ, TIMM, HF = 'workdir', 'npz', 'timm', 'hf'
FOLDER_FORMATS: dict[str, formats.FolderFormat] = {TIMM: timm, HF: hf}
SOURCES_HELP = ('pass a vit_jax.main workdir (or its best_checkpoint), an '
                'official .npz, a timm model.safetensors or hub folder, or a '
                'transformers ViT folder.')


def _safetensors_kind(path: pathlib.Path) -> str:
  """TIMM or HF, from a .safetensors file's array names."""
  keys = safetensors_file.names(path)
  for kind, folder_format in FOLDER_FORMATS.items():
    if folder_format.is_state(keys):
      return kind
  raise CheckpointError(
      f'{path} holds neither timm\'s nor transformers\' ViT arrays (it has '
      f'{files.some_names(sorted(keys)) or "no arrays"}).')


def source_kind(source: str | pathlib.Path) -> str:
  """What `source` is, from its contents: WORKDIR, NPZ, TIMM or HF."""
  if not str(source).strip():
    raise CheckpointError(f'No checkpoint given: {SOURCES_HELP}')
  path = pathlib.Path(source)
  if not path.exists():
    run = path.parent  # of a best_checkpoint it did not keep
    if path.name == 'best_checkpoint' and (run / 'config.json').exists():
      raise CheckpointError(
          f'{path} does not exist: its run kept none (config.'
          f'keep_best_checkpoint); pass the run, {run}, for its newest.')
    # A URL's '//' would print as '/': `source` as given.
    fetched = ('; a URL is never fetched: download the file first'
               if '://' in str(source) else '')
    raise CheckpointError(f'{source} does not exist{fetched}: {SOURCES_HELP}')
  if path.is_dir():
    config, _ = files.read_json(path / 'config.json')
    if isinstance(config, dict) and 'model_type' in config:
      return HF
    if isinstance(config, dict) and 'architecture' in config:
      return TIMM
    if ((path / 'checkpoints').is_dir() or config is not None or
        _names_best(path)):
      return WORKDIR
    weights = path / safetensors_file.WEIGHTS_NAME
    if weights.exists():
      return _safetensors_kind(weights)
    if 'checkpoints' in (path.name, path.parent.name):  # a run's own folder
      step = f' (--step={path.name})' if path.name.isdigit() else ''
      raise CheckpointError(f'{path} is inside a run: pass the run, '
                            f'{path.parent.parent if step else path.parent}'
                            f'{step}.')
    raise CheckpointError(f'{path} holds no checkpoint: {SOURCES_HELP}')
  # Else an .npz, or load_npz says what else the file is.
  return (_safetensors_kind(path)
          if safetensors_file.is_safetensors(path) else NPZ)


def load_params(source: str | pathlib.Path, step: int | None = None,
                model_name: str | None = None) -> Any:
  """Any checkpoint's inference parameters; `model_name`: heads if unsaid."""
  path = pathlib.Path(source)
  kind = source_kind(source)  # a URL as given
  if kind == WORKDIR:
    return names.inference_params(load_run(path, step).params)
  if step is not None:
    raise CheckpointError(f'{path} is one checkpoint; step={step} only '
                          'selects among the checkpoints of a run directory.')
  if kind == NPZ:
    return npz.load_npz(path)
  return FOLDER_FORMATS[kind].read(path, model_name)


@dataclasses.dataclass(frozen=True)
class Loaded:
  """A checkpoint from any source, with the model that applies it."""
  kind: str  # source_kind's
  model: Any  # a linen module: a run's model, or a ViT of the shapes
  variables: dict
  image_size: int  # the run's, or what the position embeddings were for
  config: ml_collections.ConfigDict | None  # a workdir's run config
  step: int | None  # a workdir's checkpoint step
  pixels: tuple[tuple, tuple]
  class_names: tuple[str, ...] = ()  # where a run or a folder names them
  position: dict = dataclasses.field(default_factory=dict)  # a run's

  @property
  def params(self) -> Any:
    return self.variables['params']


def load(source: str | pathlib.Path, *, model_name: str | None = None,
         step: int | None = None) -> Loaded:
  """Any checkpoint and its model: the config's, `model_name`'s or shapes'."""
  path = pathlib.Path(source)
  kind = source_kind(source)  # a URL as given
  if kind == WORKDIR:
    if model_name:
      raise CheckpointError(f'{path} is a run, whose config names its model: '
                            f'leave out --model={model_name}.')
    run = load_run(path, step)
    model = models.from_config(run.config,
                               run.params[names.HEAD]['bias'].shape[-1])
    variables = {**run.variables, 'params': names.inference_params(run.params)}
    recorded = class_names(run_directory(path))  # a file of the run's count
    return Loaded(
        WORKDIR, model, variables, run.config.image_size, run.config, run.step,
        (tuple(run.config.pixel_mean), tuple(run.config.pixel_std)),
        recorded if len(recorded) == model.num_classes else (), run.position)
  params = load_params(path, step, model_name)
  model, image_size = vit_model.model_for(params, model_name=model_name,
                                          source=str(path))
  named = FOLDER_FORMATS[kind].class_names(path) if kind != NPZ else ()
  return Loaded(kind, model, {'params': params}, image_size, None, None,
                trained_pixels(path),
                named if len(named) == model.num_classes else ())


def trained_pixels(source: str | pathlib.Path) -> tuple[tuple, tuple] | None:
  """The (mean, std) `source` was trained on, without loading its arrays."""
  kind = source_kind(source)
  if kind != WORKDIR:
    return (vit_model.RELEASED_PIXELS
            if kind == NPZ else FOLDER_FORMATS[kind].pixels(source))
  config, _ = files.read_json(run_directory(source) / 'config.json')
  if not isinstance(config, dict) or {'pixel_mean', 'pixel_std'} - set(config):
    return None
  return tuple(config['pixel_mean']), tuple(config['pixel_std'])


def pixel_flags(pixels: tuple[tuple, tuple]) -> str:
  """The overrides that normalize a run's input with `pixels` (mean, std)."""
  mean, std = (','.join(f'{x:g}' for x in p) for p in pixels)
  return f'--config.pixel_mean={mean} --config.pixel_std={std}'

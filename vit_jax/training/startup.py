"""What `train.train_and_evaluate` sets up before its loop."""

import contextlib
import dataclasses
import json
import pathlib
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
import numpy as np

from vit_jax import data
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import ConfigError
from vit_jax.errors import WorkdirError
from vit_jax.models import masked_autoencoder
from vit_jax.models import names
from vit_jax.objectives import distillation
from vit_jax.objectives import locality_guidance
from vit_jax.objectives import losses
from vit_jax.runtime import distributed
from vit_jax.runtime import files
from vit_jax.runtime import sharding
from vit_jax.runtime import workdir_lock
from vit_jax.training import finetune
from vit_jax.training import plan as plan_lib
from vit_jax.training import provenance
from vit_jax.training import steps


def record_changes(workdir: pathlib.Path, step: int, changed: dict[str, tuple]):
  """Logs and appends to `config_changes.jsonl` what a resumed run changed."""
  logging.info(
      'Resuming with changed %s.',
      ', '.join(f'config.{name} ({old!r} -> {new!r})'
                for name, (old, new) in changed.items()))
  changes = {n: dict(before=old, after=new) for n, (old, new) in changed.items()}
  if jax.process_index() == 0:
    with (workdir / 'config_changes.jsonl').open('a') as f:
      f.write(json.dumps({'step': step, 'changed': changes}) + '\n')


RUNS_READ_FILE = 'runs_read.json'  # written by `record_run`


def runs_read(config, workdir: pathlib.Path, resuming: bool) -> dict:
  """`provenance.runs_read` as the run's first start-up read them."""
  # A student resumed after its teacher finished trained on the unfinished one.
  first = files.read_json(workdir / RUNS_READ_FILE)[0] if resuming else None
  return provenance.runs_read(config) if first is None else first


def _parameter_count(params) -> str:
  """'N parameters', and how many more serve only training."""
  total, kept = (sum(leaf.size for leaf in jax.tree.leaves(tree))
                 for tree in (params, names.inference_params(params)))
  return f'{kept:,} parameters' + (
      f', and {total - kept:,} used only in training' if total > kept else '')


@contextlib.contextmanager
def sole_writer(workdir: pathlib.Path):
  """The workdir's lock, held by process 0 while the run lasts."""
  lock = workdir_lock.WorkdirLock(workdir)
  refusal = None
  if jax.process_index() == 0:
    try:
      lock.acquire()
    except WorkdirError as e:
      refusal = e
  if jax.process_count() > 1 and multihost_utils.broadcast_one_to_all(
      np.int32(refusal is not None)) and refusal is None:
    refusal = WorkdirError(f'The workdir {workdir} cannot be used; process 0 '
                           'of the job says why.')
  if refusal is not None:
    raise refusal
  try:
    if jax.process_index() == 0:
      for partial in workdir.glob('*' + files.PARTIAL_SUFFIX):
        partial.unlink(missing_ok=True)
    yield
  finally:
    lock.release()


def trained_model(config, num_classes: int):
  """The model the step trains: `config.model` and its training wrappers."""
  if config.dtype == 'bfloat16' and jax.default_backend() == 'cpu':
    logging.warning('config.dtype=bfloat16 on a CPU sums bias gradients in '
                    'bfloat16, losing part of them: train in float32.')
  model = models.from_config(config, num_classes)
  fields = models.training_fields(config)
  try:
    if fields['guided_blocks'] or fields['guidance_widths']:
      model = locality_guidance.GuidedViT(model, tuple(fields['guided_blocks']),
                                          tuple(fields['guidance_widths']))
    if fields['mae_mask_ratio']:
      if isinstance(model, locality_guidance.GuidedViT):
        raise ValueError('guided_blocks imitate a CNN on every patch, which '
                         'mae_mask_ratio > 0 hides: use one or the other.')
      model = masked_autoencoder.MaskedAutoencoder(
          model, fields['mae_mask_ratio'], fields['mae_decoder_depth'],
          fields['mae_decoder_width'])
      masked_autoencoder.kept_count(
          (config.image_size // model.vit.effective_patch_size)**2,
          fields['mae_mask_ratio'])
  except ValueError as e:
    raise ConfigError(str(e)) from e
  return model


def trained_model_and_objective(
    config, num_classes: int,
    replicated) -> tuple[Any, losses.Objective, list[tuple[Any, Any]]]:
  """The model the step trains, its objective, and the teachers it runs."""
  model = trained_model(config, num_classes)
  objective, frozen = losses.classification, {}
  for load, doing in ((distillation.load_teacher,
                       'Distilling from the run in %s.'),
                      (locality_guidance.load_guide,
                       'Guided by the stage features of the CNN run in %s.')):
    if teacher := load(config, num_classes, replicated):
      logging.info(doing, teacher.workdir)
      # A run that both teaches and guides shares its variables, so that XLA
      # computes the two identical forward passes once (and FLOPs count one).
      _, variables = frozen.setdefault(
          pathlib.Path(teacher.workdir).resolve(),
          (teacher.module, teacher.variables))
      teacher = dataclasses.replace(teacher, variables=variables)
      objective = teacher.objective(objective)
  if isinstance(model, masked_autoencoder.MaskedAutoencoder):
    logging.info(
        'Pre-training as a masked autoencoder (%d%% of the patches hidden); '
        'the accuracy is an online probe\'s.', round(100 * model.mask_ratio))
    objective = masked_autoencoder.objective(objective,
                                             model.vit.effective_patch_size)
  return model, objective, list(frozen.values())


def pretrained_state(config, state, state_shapes, pretrained):
  """`state` with `config.init_from`'s parameters, laid out as before."""
  params = sharding.from_hosts(
      finetune.pretrained_params(config, state.params, pretrained),
      jax.tree.map(lambda shape: shape.sharding, state_shapes.params),
      f'config.init_from={config.init_from}')
  state = state.replace(params=params)
  if isinstance(state, steps.AveragedTrainState):
    # A copy: the step donates the state, and a buffer cannot be donated
    # twice.
    state = state.replace(ema_params=jax.tree.map(jnp.copy, params))
  return state


def check_processes_agree(config, code: str | None, workdir: pathlib.Path):
  """DistributedError unless all share `config`, commit `code`, config.json."""
  distributed.check_alike([f'{code} {config.to_json_best_effort()}'],
                          'run another config or commit than process 0: start '
                          'every process with the same flags, from the same '
                          'checkout.')
  # A host without it would rebuild it from a checkpoint, through a restore
  # whose barrier the others never reach.
  saved, _ = files.read_json(workdir / 'config.json')
  distributed.check_alike([json.dumps(saved)],
                          f'read another {workdir / "config.json"} than '
                          f'process 0: {distributed.SEE_THE_SAME_FILES}')


def check_ema(config, state_shapes):
  """ConfigError for a moving average of a model with BatchNorm."""
  if config.ema_decay and state_shapes.batch_stats:
    raise ConfigError(
        f'config.ema_decay={config.ema_decay} averages the parameters only, '
        f'and {config.model} also keeps BatchNorm statistics, which would not '
        'match the average: set --config.ema_decay=0 for it.')


def record_run(config, workdir: pathlib.Path, inputs: data.Input,
               plan: plan_lib.StepPlan, params, read: dict) -> dict:
  """Writes config.json and `read`, logs what trains; the config as recorded."""
  run_config = json.loads(config.to_json_best_effort())
  if jax.process_index() == 0:  # the workdir is made by its lock's holder
    files.write_json(workdir / 'config.json', run_config, indent=2)
    files.write_json(workdir / RUNS_READ_FILE, read)
    if inputs.class_names:  # for evaluate, analyze and the exports
      files.write_json(workdir / reading.CLASS_NAMES_FILE, inputs.class_names)
  processes = (f' in {jax.process_count()} processes'
               if jax.process_count() > 1 else '')
  logging.info(
      '%s (%s) on %d device(s)%s: %d train / %s examples, %d step%s of batch '
      '%d (%d per epoch).', config.model, _parameter_count(params),
      jax.device_count(), processes, inputs.train_size,
      ' / '.join(f'{n} {split}'
                 for split, n in inputs.eval_sizes.items()), plan.total_steps,
      's' * (plan.total_steps != 1), config.batch_size, plan.steps_per_epoch)
  return run_config

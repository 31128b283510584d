"""Training and evaluation: the state, the compiled steps and the epoch loop.

One `jax.jit` train step and one eval step run over a `Mesh` of all devices:
the batch is sharded along the `data` axis, parameters and optimizer state are
replicated, and the state's buffers are donated, so the same code serves
1 CPU, N GPUs or many hosts. Data enters through one of two inputs
(`config.input_pipeline`): the whole dataset on every device, each step
gathering its batch there from indices (`input_pipeline.OnDeviceInput`, small
datasets), or batches read, cropped and resized on the hosts
(`streaming.StreamingInput`, ImageNet-scale).

Several processes (multi-host, `runtime.initialize_distributed`): the mesh
spans every process's devices and every process runs this same loop. Each
builds the same global batch indices from the seed; on device, it passes them
replicated and `with_sharding_constraint` splits them along `data`, so each
device gathers only its `batch_size / device_count` examples; streaming, each
process reads only its own devices' rows of every global batch. Gradients and
summed metrics are reduced across all devices, so every process holds the same
replicated state and metrics. All processes take part in checkpointing (orbax
coordinates them; its primary host, process 0, writes the metadata), while
config.json, summary.json, metrics.jsonl and TensorBoard files are written by
process 0 alone. The workdir must be on a filesystem all processes share.
"""

import functools
import json
import math
import pathlib
import time
from typing import Any

from absl import logging
from flax.training import train_state
import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp

from vit_jax import checkpoint
from vit_jax import finetune
from vit_jax import input_pipeline
from vit_jax import metric_writer
from vit_jax import models
from vit_jax import streaming

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}
OPTIMIZERS = ('adamw', 'sgd')
LR_DECAYS = ('cosine', 'linear')
INPUT_PIPELINES = ('on_device', 'streaming')


class ConfigError(ValueError):
  """The configuration cannot be run as it is."""


class TrainingDivergedError(RuntimeError):
  """The loss stopped being finite."""


class TrainState(train_state.TrainState):
  batch_stats: Any = None


# ------------------------------------------------------------ set-up -------


def validate_config(config: ml_collections.ConfigDict, num_devices: int):
  """Checks what needs no data; raises ConfigError before anything compiles."""
  positive = ('learning_rate', 'num_epochs', 'batch_size', 'eval_batch_size',
              'image_size', 'checkpoint_every_epochs', 'keep_checkpoints')
  for field in positive:
    if not config[field] > 0:
      raise ConfigError(f'config.{field}={config[field]} must be positive.')
  if config.get('input_pipeline', 'on_device') not in INPUT_PIPELINES:
    raise ConfigError(f'config.input_pipeline={config.input_pipeline!r}; use '
                      f'one of {INPUT_PIPELINES}.')
  if config.get('lr_decay', 'cosine') not in LR_DECAYS:
    raise ConfigError(f'config.lr_decay={config.lr_decay!r}; use one of '
                      f'{LR_DECAYS}.')
  for field in ('warmup_epochs', 'weight_decay', 'grad_clip_norm'):
    if config[field] < 0:
      raise ConfigError(f'config.{field}={config[field]} must be >= 0.')
  if not 0 <= config.label_smoothing < 1:
    raise ConfigError(f'config.label_smoothing={config.label_smoothing} must '
                      'be in [0, 1).')
  if config.optimizer not in OPTIMIZERS:
    raise ConfigError(f'config.optimizer={config.optimizer!r}; use one of '
                      f'{OPTIMIZERS}.')
  if config.dtype not in DTYPES:
    raise ConfigError(f'config.dtype={config.dtype!r}; use one of '
                      f'{tuple(DTYPES)}.')
  for field in ('batch_size', 'eval_batch_size'):
    if config[field] % num_devices:
      raise ConfigError(
          f'config.{field}={config[field]} is not divisible by the '
          f'{num_devices} devices; use a multiple of {num_devices} (on a CPU, '
          'config.cpu_devices sets the number of devices).')
  accumulation = config.get('grad_accumulation_steps', 1)
  if accumulation < 1 or config.batch_size % (accumulation * num_devices):
    raise ConfigError(
        f'config.grad_accumulation_steps={accumulation} must be >= 1 and '
        f'split config.batch_size={config.batch_size} into micro-batches '
        f'divisible by the {num_devices} devices.')
  compiler_options(config)


def create_model(config: ml_collections.ConfigDict, num_classes: int):
  try:
    model = models.create_model(
        config.model, num_classes, dtype=DTYPES[config.dtype],
        **config.get('model_overrides', {}))
  except (ValueError, TypeError) as e:
    raise ConfigError(str(e)) from e
  patch_size = getattr(model, 'effective_patch_size', None)
  if patch_size and config.image_size % patch_size:
    raise ConfigError(
        f'config.image_size={config.image_size} is not divisible by the patch '
        f'size {patch_size} of {config.model}; use a multiple of {patch_size}.')
  return model


def create_learning_rate_schedule(config, steps_per_epoch: int):
  """Linear warmup from 0 (`warmup_steps`, else `warmup_epochs`), then
  `lr_decay` ('cosine', the default, or 'linear') to 0 at the last step."""
  total_steps = config.num_epochs * steps_per_epoch
  warmup_steps = (config.get('warmup_steps') or
                  config.warmup_epochs * steps_per_epoch)
  if warmup_steps >= total_steps:
    logging.warning('The warmup (%d steps) is not shorter than the run (%d '
                    'steps): the run only warms up.', warmup_steps,
                    total_steps)
    warmup_steps = total_steps
  if config.get('lr_decay', 'cosine') == 'cosine':
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.learning_rate,
        warmup_steps=warmup_steps,
        decay_steps=max(total_steps, warmup_steps + 1), end_value=0.0)
  return optax.join_schedules([
      optax.linear_schedule(0.0, config.learning_rate, warmup_steps),
      optax.linear_schedule(config.learning_rate, 0.0,
                            max(total_steps - warmup_steps, 1)),
  ], [warmup_steps])


def create_optimizer(config, schedule) -> optax.GradientTransformation:
  if config.optimizer == 'adamw':
    tx = optax.adamw(schedule, b1=config.adam_b1, b2=config.adam_b2,
                     weight_decay=config.weight_decay)
  else:
    tx = optax.chain(optax.add_decayed_weights(config.weight_decay),
                     optax.sgd(schedule, momentum=config.momentum))
  if config.grad_clip_norm:
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
  return tx


def create_train_state(key, model, tx, image_size: int,
                       sharding: NamedSharding) -> TrainState:

  @functools.partial(jax.jit, out_shardings=sharding)
  def init(key):
    variables = model.init(
        key, jnp.zeros((1, image_size, image_size, 3)), train=False)
    return TrainState.create(
        apply_fn=model.apply, params=variables['params'], tx=tx,
        batch_stats=variables.get('batch_stats'))

  return init(key)


def pretrained_params(config, model, fresh_params) -> dict:
  """`config.init_from` (a run directory or a released .npz) fitted to
  `model`; see `finetune.adapt_params`."""
  try:
    pretrained = checkpoint.load_params(config.init_from)
    adapted = finetune.adapt_params(
        pretrained, jax.device_get(fresh_params),
        num_prefix_tokens=int(getattr(model, 'classifier', '') == 'token'))
  except checkpoint.CheckpointError as e:
    raise ConfigError(f'config.init_from={config.init_from!r}: {e}') from e
  logging.info('Initialised from %s.', config.init_from)
  return adapted


# ------------------------------------------------------------- steps -------


def cross_entropy(logits, labels, label_smoothing: float):
  targets = optax.smooth_labels(
      jax.nn.one_hot(labels, logits.shape[-1]), label_smoothing)
  return optax.softmax_cross_entropy(logits, targets)


def model_variables(params, batch_stats) -> dict:
  if batch_stats is None:
    return {'params': params}
  return {'params': params, 'batch_stats': batch_stats}


def _inputs(data, batch, key, *, config, batch_sharding):
  """(normalised images, labels) of a batch, sharded along `data`.

  `data` is the on-device (images, labels) of a split and `batch` indices
  into it (input_pipeline), or `data` is None and `batch` the (images, labels)
  themselves, already cropped and resized on the host (streaming). `key` is
  None for evaluation: no augmentation.
  """
  batch = jax.lax.with_sharding_constraint(batch, batch_sharding)
  if data is None:
    images, labels = batch
    augment = False
  else:
    images, labels = data[0][batch], data[1][batch]
    augment = config.augment and key is not None
  x = input_pipeline.preprocess(
      images, key=key, augment=augment, image_size=config.image_size,
      mean=config.pixel_mean, std=config.pixel_std)
  return x, labels


def train_step(state: TrainState, data, batch, key, *, config,
               batch_sharding):
  """One optimizer step on `batch` (see `_inputs` for `data` and `batch`).

  With `config.grad_accumulation_steps` = k > 1 the batch is split into k
  micro-batches whose gradients are averaged before the update: the same step
  in a k-th of the activation memory, as the paper fine-tunes.
  """
  key = jax.random.fold_in(key, state.step)
  accumulation = config.get('grad_accumulation_steps', 1)

  def gradients(batch_stats, micro_batch, micro_key):
    augment_key, dropout_key = jax.random.split(micro_key)
    x, y = _inputs(data, micro_batch, augment_key, config=config,
                   batch_sharding=batch_sharding)

    def loss_fn(params):
      logits, updates = state.apply_fn(
          model_variables(params, batch_stats), x, train=True,
          mutable=['batch_stats'],
          rngs={'dropout': dropout_key})
      loss = cross_entropy(logits, y, config.label_smoothing).mean()
      return loss, (logits, updates)

    (loss, (logits, updates)), grads = jax.value_and_grad(
        loss_fn, has_aux=True)(state.params)
    metrics = {
        'loss': loss * y.shape[0],
        'correct': jnp.sum(jnp.argmax(logits, -1) == y),
        'count': jnp.asarray(y.shape[0], jnp.float32),
    }
    return updates.get('batch_stats'), grads, metrics

  if accumulation == 1:
    batch_stats, grads, metrics = gradients(state.batch_stats, batch, key)
  else:
    def accumulate(carry, step_inputs):
      batch_stats, grad_sum, metric_sum = carry
      i, micro_batch = step_inputs
      batch_stats, grads, metrics = gradients(
          batch_stats, micro_batch, jax.random.fold_in(key, i))
      return (batch_stats, jax.tree.map(jnp.add, grad_sum, grads),
              jax.tree.map(jnp.add, metric_sum, metrics)), None

    zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)
    metric_zeros = {'loss': jnp.zeros(()), 'correct': jnp.zeros((), jnp.int32),
                    'count': jnp.zeros(())}
    micro_batches = jax.tree.map(
        lambda a: a.reshape(accumulation, -1, *a.shape[1:]), batch)
    (batch_stats, grads, metrics), _ = jax.lax.scan(
        accumulate, (state.batch_stats, zeros(state.params), metric_zeros),
        (jnp.arange(accumulation), micro_batches))
    grads = jax.tree.map(lambda g: g / accumulation, grads)
  state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
  return state, metrics


def eval_step(state: TrainState, data, batch, mask, *, config,
              batch_sharding):
  """Summed loss and correct count over the unmasked examples of a batch."""
  x, y = _inputs(data, batch, None, config=config,
                 batch_sharding=batch_sharding)
  logits = state.apply_fn(
      model_variables(state.params, state.batch_stats), x, train=False)
  loss = cross_entropy(logits, y, config.label_smoothing)
  return {
      'loss': jnp.sum(loss * mask),
      'correct': jnp.sum((jnp.argmax(logits, -1) == y) * mask),
      'count': jnp.sum(mask),
  }


def _sum(totals, metrics):
  return metrics if totals is None else jax.tree.map(jnp.add, totals, metrics)


def _averages(totals) -> dict[str, float]:
  totals = jax.device_get(totals)
  return {
      'loss': float(totals['loss'] / totals['count']),
      'accuracy': float(totals['correct'] / totals['count']),
      'count': int(totals['count']),
  }


def compiler_options(config) -> dict[str, str] | None:
  """XLA options the steps compile with: `config.cpu_compiler_options` on a
  CPU backend, none elsewhere. Raises ConfigError for an option XLA lacks."""
  if jax.default_backend() != 'cpu':
    return None
  options = {name: str(value) for name, value in
             config.get('cpu_compiler_options', {}).items()}
  if not options:
    return None
  _check_compiler_options(tuple(sorted(options.items())))
  return options


@functools.cache
def _check_compiler_options(options: tuple[tuple[str, str], ...]):
  """Compiles an empty program with `options`: XLA rejects unknown names."""
  try:
    jax.jit(lambda: 0).lower().compile(dict(options))
  except jax.errors.JaxRuntimeError as e:
    raise ConfigError(
        f'config.cpu_compiler_options={dict(options)}: {e}. Use XLA option '
        'names this jax version knows, without the leading "--".') from e


def compile_steps(config, state, inputs, key, batch_sharding):
  """Compiles the train and eval steps for `inputs`' batches, once."""
  start = time.perf_counter()
  options = compiler_options(config)
  step_kwargs = dict(config=config, batch_sharding=batch_sharding)
  train_batch, eval_batch, eval_mask = inputs.batch_specs()
  train_step_fn = jax.jit(
      functools.partial(train_step, **step_kwargs), donate_argnums=0).lower(
          state, inputs.train_data, train_batch, key).compile(options)
  eval_step_fn = jax.jit(functools.partial(eval_step, **step_kwargs)).lower(
      state, inputs.test_data, eval_batch, eval_mask).compile(options)
  logging.info('Compiled the train and eval steps in %.1fs.',
               time.perf_counter() - start)
  return train_step_fn, eval_step_fn


def create_input(config, mesh):
  """`config.input_pipeline`'s input: the dataset on every device
  ('on_device', the default) or streamed from the host ('streaming')."""
  kind = config.get('input_pipeline', 'on_device')
  if kind == 'on_device':
    inputs = input_pipeline.OnDeviceInput(
        input_pipeline.load_dataset(config), config, mesh)
  else:
    inputs = streaming.StreamingInput(streaming.open_dataset(config), config,
                                      mesh)
  input_pipeline.check_same_on_every_process(inputs.fingerprint())
  if config.batch_size > inputs.train_size:
    raise ConfigError(f'config.batch_size={config.batch_size} is larger than '
                      f'the {inputs.train_size} training examples.')
  return inputs


# ------------------------------------------------------------- loop --------


def summarize(history: list[dict]) -> dict:
  best = max(history, key=lambda r: r['test_accuracy'])
  return {
      'best_test_accuracy': best['test_accuracy'],
      'best_epoch': best['epoch'],
      'final_test_accuracy': history[-1]['test_accuracy'],
      'final_train_accuracy': history[-1]['train_accuracy'],
      'epochs': history[-1]['epoch'],
      'train_seconds': sum(r['epoch_seconds'] for r in history),
  }


def _format_seconds(seconds: float) -> str:
  minutes, seconds = divmod(int(seconds), 60)
  return f'{minutes}:{seconds:02d}'


def restore_or_start(checkpoints: ocp.CheckpointManager, state: TrainState,
                     pretrained: dict | None, replicated: NamedSharding
                     ) -> tuple[TrainState, list[dict]]:
  """(state, history of the finished epochs): the latest checkpoint's, else
  `state` with the `pretrained` parameters if any, and no history."""
  epoch = checkpoints.latest_step()
  if epoch is not None:
    restored = checkpoints.restore(
        epoch,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(state),
            history=ocp.args.JsonRestore()))
    logging.info('Resumed from %s at the end of epoch %d.',
                 checkpoints.directory, epoch)
    return restored.state, list(restored.history)
  if pretrained is not None:
    state = state.replace(params=jax.tree.map(
        lambda x: input_pipeline.replicate(x, replicated), pretrained))
  return state, []


def train_epoch(train_step_fn, state: TrainState, inputs, epoch: int,
                key) -> tuple[TrainState, dict[str, float]]:
  totals = None
  for batch in inputs.train_batches(epoch):
    state, metrics = train_step_fn(state, inputs.train_data, batch, key)
    totals = _sum(totals, metrics)
  return state, _averages(totals)


def evaluate(eval_step_fn, state: TrainState, inputs) -> dict[str, float]:
  totals = None
  for batch, mask in inputs.eval_batches():
    totals = _sum(totals, eval_step_fn(state, inputs.test_data, batch, mask))
  return _averages(totals)


def _log_progress(history: list[dict], num_epochs: int):
  record = history[-1]
  remaining = (num_epochs - record['epoch']) * np.mean(
      [r['epoch_seconds'] for r in history[-3:]])
  logging.info(
      'epoch %d/%d  train loss %.4f acc %.2f%%  test loss %.4f acc %.2f%%  '
      'lr %.2e  %.0f img/s  ETA %s', record['epoch'], num_epochs,
      record['train_loss'], 100 * record['train_accuracy'],
      record['test_loss'], 100 * record['test_accuracy'],
      record['learning_rate'], record['images_per_second'],
      _format_seconds(remaining))


def train_and_evaluate(config: ml_collections.ConfigDict,
                       workdir: str) -> dict:
  """Trains `config` in `workdir`, resuming from its latest checkpoint.

  Returns the summary: best test accuracy and its epoch, final accuracies.
  """
  workdir = pathlib.Path(workdir).absolute()
  validate_config(config, jax.device_count())
  mesh = jax.make_mesh((jax.device_count(),), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))
  replicated = NamedSharding(mesh, P())
  batch_sharding = NamedSharding(mesh, P('data'))
  inputs = create_input(config, mesh)
  model = create_model(config, inputs.num_classes)

  steps_per_epoch = inputs.train_size // config.batch_size
  schedule = create_learning_rate_schedule(config, steps_per_epoch)
  root_key = jax.random.key(config.seed)
  init_key, step_key = jax.random.split(root_key)
  state = create_train_state(init_key, model, create_optimizer(config, schedule),
                             config.image_size, replicated)
  # Read (and checked) before anything is written; used unless resuming.
  pretrained = (pretrained_params(config, model, state.params)
                if config.get('init_from') else None)

  workdir.mkdir(parents=True, exist_ok=True)
  checkpoints = ocp.CheckpointManager(
      workdir / 'checkpoints',
      options=ocp.CheckpointManagerOptions(
          max_to_keep=config.keep_checkpoints, create=True))
  state, history = restore_or_start(checkpoints, state, pretrained,
                                    replicated)
  start_epoch = len(history) + 1
  if jax.process_index() == 0:
    (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2))
  writer = metric_writer.MetricWriter(workdir, history)

  if start_epoch > config.num_epochs:
    logging.info('%s already holds all %d epochs; nothing to train.', workdir,
                 config.num_epochs)
  else:
    train_step_fn, eval_step_fn = compile_steps(config, state, inputs,
                                                step_key, batch_sharding)
    processes = (f' in {jax.process_count()} processes'
                 if jax.process_count() > 1 else '')
    logging.info(
        '%s (%s parameters) on %d device(s)%s: %d train / %d test examples, '
        '%d steps per epoch.', config.model,
        f'{sum(x.size for x in jax.tree.leaves(state.params)):,}',
        jax.device_count(), processes, inputs.train_size, inputs.test_size,
        steps_per_epoch)

  try:
    for epoch in range(start_epoch, config.num_epochs + 1):
      epoch_start = time.perf_counter()
      state, train = train_epoch(train_step_fn, state, inputs, epoch, step_key)
      train_seconds = time.perf_counter() - epoch_start
      if not math.isfinite(train['loss']):
        raise TrainingDivergedError(
            f'The training loss became {train["loss"]} in epoch {epoch}; '
            f'stopped without saving it. The last good checkpoint in '
            f'{workdir / "checkpoints"} is kept. Lower config.learning_rate or '
            'set config.grad_clip_norm.')
      test = evaluate(eval_step_fn, state, inputs)

      record = {
          'epoch': epoch,
          'step': int(state.step),
          'train_loss': train['loss'],
          'train_accuracy': train['accuracy'],
          'test_loss': test['loss'],
          'test_accuracy': test['accuracy'],
          'test_examples': test['count'],
          'learning_rate': float(schedule(int(state.step))),
          'images_per_second': train['count'] / train_seconds,
          'epoch_seconds': time.perf_counter() - epoch_start,
      }
      history.append(record)
      if epoch % config.checkpoint_every_epochs == 0 or (
          epoch == config.num_epochs):
        checkpoints.save(
            epoch,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                history=ocp.args.JsonSave(history)))
      writer.write(record)
      _log_progress(history, config.num_epochs)
  finally:
    checkpoints.wait_until_finished()
    checkpoints.close()
    writer.close()

  summary = summarize(history)
  if jax.process_index() == 0:
    (workdir / 'summary.json').write_text(json.dumps(summary, indent=2))
  logging.info(
      'Done: best test accuracy %.2f%% at epoch %d; final train accuracy '
      '%.2f%%.', 100 * summary['best_test_accuracy'], summary['best_epoch'],
      100 * summary['final_train_accuracy'])
  return summary

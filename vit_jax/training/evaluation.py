"""A model's loss, top-1 and top-5 accuracy over a whole split."""

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax import config_schema
from vit_jax import data
from vit_jax.checkpoints import reading
from vit_jax.errors import ConfigError
from vit_jax.runtime import distributed
from vit_jax.runtime import sharding
from vit_jax.training import steps


def over_split(eval_step, state, inputs: data.Input, split: str, label: str,
               progress_from: int = 50) -> dict:
  """Loss, accuracy and top-5 accuracy over every example of `split`, once."""
  sums = steps.zero_sums(sharding.replicated(inputs.mesh), steps.EVAL_SUMS)
  total = inputs.num_eval_batches(split)
  for i, (batch, mask) in enumerate(inputs.eval_batches(split), 1):
    sums = eval_step(state, sums, inputs.eval_data, batch, mask)
    # Progress a tenth at a time for a split of `progress_from` batches or more.
    if total >= progress_from and i % max(total // 10, 1) == 0 and i < total:
      jax.block_until_ready(sums)
      logging.info('%s: evaluated %d/%d %s batches', label, i, total, split)
  return steps.averages(sums)


def _config_for(loaded: reading.Loaded, config, source, data_dir,
                released_preprocessing) -> ml_collections.ConfigDict:
  """The config the evaluation reads its data with (a copy)."""
  if config is None:
    if loaded.config is None:
      raise ConfigError(f'{source} is a {loaded.kind} checkpoint, which says '
                        'nothing of the data: pass --config naming the '
                        'dataset, e.g. --config=configs/cifar_small.py.')
    config = loaded.config
  elif loaded.config is not None and config.model != loaded.config.model:
    raise ConfigError(
        f'--config names model {config.model}, but {source} trained '
        f'{loaded.config.model}: pass a config of that model (or '
        f'--config.model={loaded.config.model}), or leave out --config.')
  config = ml_collections.ConfigDict(config.to_dict())
  if data_dir:
    config.data_dir = data_dir
  if released_preprocessing:
    config.image_size = loaded.image_size
    config.pixel_mean, config.pixel_std = loaded.pixels
  elif config.image_size != loaded.image_size and (
      loaded.kind != reading.WORKDIR or
      getattr(loaded.model, 'posemb', None) == 'learned'):
    raise ConfigError(
        f'config.image_size={config.image_size}, but the position embeddings '
        f'of {source} were trained for {loaded.image_size}x'
        f'{loaded.image_size} images: pass --config.image_size='
        f'{loaded.image_size}, or --released_preprocessing.')
  return config


def _check_held_out(run, config, source):
  """A workdir's validation split is the one its run held out."""
  if not run.get('validation_examples'):
    raise ConfigError(f'{source} held out no validation images (any drawn '
                      'would be ones it trained on): evaluate --split=test, or '
                      'pass --config.validation_dir=DIR.')
  drawn = ('dataset', 'train_split', 'validation_dir', 'validation_examples',
           'train_examples_per_file')  # what the draw depends on
  if changed := [f'{f}={config[f]}' for f in drawn if config[f] != run.get(f)]:
    raise ConfigError(
        f'{", ".join(changed)} differs from the run of {source}, and would '
        'draw validation images it trained on: leave them at the run\'s.')


def evaluate(source, *, config=None, model_name=None, step=None, data_dir=None,
             released_preprocessing=False, split='test',
             class_head=False) -> dict:
  """Loss, top-1 and top-5 of `source` on `config`'s (or its own) `split`."""
  loaded = reading.load(source, model_name=model_name, step=step)
  config = _config_for(loaded, config, source, data_dir, released_preprocessing)
  distributed.check_alike(
      [config.to_json_best_effort()],
      "evaluate another config than process 0 (its flags, --config file or the "
      "run's config.json): start every process with the same flags; every "
      'host must see the same files.')
  if split == 'test':
    # The test split reads no training image: the input is given the fewest
    # it accepts (a batch of one a device, whatever the run's batch), drawn
    # without decoding the rest, and no validation split.
    config.train_examples = config.batch_size = jax.device_count()
    config.validation_examples, config.validation_dir = 0, ''
  elif loaded.kind == reading.WORKDIR and not config.validation_dir:
    _check_held_out(loaded.config, config, source)
  config_schema.validate(config, jax.device_count(), training=False)
  model = (loaded.model if loaded.kind == reading.WORKDIR else
           loaded.model.clone(dtype=jnp.dtype(config.dtype)))
  mesh = sharding.make_mesh(config.fsdp)
  inputs = data.create_input(config, mesh)
  if inputs.num_classes != model.num_classes:
    raise ConfigError(f'{source} classifies {model.num_classes} classes, but '
                      f'config.dataset={config.dataset!r} has '
                      f'{inputs.num_classes}: evaluate it on the data it was '
                      'trained for, or fine-tune it first (config.init_from).')
  if loaded.kind == reading.WORKDIR:  # a folder's names are for people to read
    inputs.check_class_names(
        loaded.class_names, source, 'evaluate it on the classes it was '
        f'trained on, in the order its {reading.CLASS_NAMES_FILE} lists them.')
    if split == 'validation' and config.validation_dir == loaded.config.get(
        'validation_dir', ''):  # the run's held-out images, else the user's
      inputs.check_validation(loaded.position, source,
                              'evaluate it on the data it trained on.')
  replicated = sharding.replicated(mesh)
  variables = sharding.from_hosts(loaded.variables, replicated, str(source))
  apply = model.apply
  if class_head:
    if not getattr(model, 'distillation_token', False):
      raise ConfigError(f'{source} has one head: --class_head reads the class '
                        'head of a distilled ViT alone.')
    apply = lambda variables, images, train: model.apply(
        variables, images, train=train, return_out=True)[1]['class_logits']
  state = steps.TrainState.create(apply_fn=apply, params=variables['params'],
                                  tx=optax.identity(),
                                  batch_stats=variables.get('batch_stats'))
  eval_step = steps.compile_eval(config, inputs, state)
  if split not in inputs.eval_sizes:
    raise ConfigError(f'{source} has no {split} split to evaluate: pass '
                      '--config.validation_examples=N.')
  logging.info('Evaluating %s (%s) on %d %s examples of %s, %d batches.',
               source, loaded.kind, inputs.eval_sizes[split], split,
               config.dataset, inputs.num_eval_batches(split))
  results = over_split(eval_step, state, inputs, split, str(source),
                       progress_from=1)
  return dict(top1=results['accuracy'], top5=results['top5_accuracy'],
              loss=results['loss'], examples=results['count'], split=split,
              head='class' if class_head else 'model', checkpoint=str(source),
              format=loaded.kind,
              **({} if loaded.step is None else {'step': loaded.step}),
              dataset=config.dataset, image_size=config.image_size)

"""vit_jax.training.evaluation: a checkpoint's loss, top-1 and top-5 over a whole split."""

import json
import shutil

import jax
import numpy as np
import pytest

from tests import helpers
from vit_jax.checkpoints import export
from vit_jax.checkpoints import reading
from vit_jax.checkpoints import run_checkpoints
from vit_jax.errors import ConfigError
from vit_jax.errors import DatasetError
from vit_jax.training import evaluation
from vit_jax.training import train


def _as_logged(result: dict, workdir) -> dict:
  """The run's last logged evaluation, whose top-1 and loss `result` has."""
  logged = [r for r in helpers.history(workdir) if 'test_accuracy' in r][-1]
  assert result['top1'] == logged['test_accuracy']
  assert result['loss'] == pytest.approx(logged['test_loss'], rel=1e-5)
  return logged


def test_a_run_evaluates_to_the_accuracy_it_logged(trained_vit_run):
  workdir, data_dir = trained_vit_run
  result = evaluation.evaluate(workdir)
  logged = _as_logged(result, workdir)
  # 37 examples in batches of 16: the last batch is masked.
  assert result['examples'] == logged['test_examples'] == 37
  assert result['top1'] <= result['top5'] <= 1
  assert (result['format'], result['step']) == ('workdir', logged['step'])
  # Its loss is the true labels' cross-entropy, as trained with smoothing.
  config = helpers.trained_vit_config(data_dir)
  assert config.label_smoothing
  config.label_smoothing = 0.0
  assert evaluation.evaluate(workdir, config=config) == result
  # Another image size than its position embeddings', or validation images
  # it never held out: one line each.
  config = helpers.trained_vit_config(data_dir)
  config.image_size = 32
  with pytest.raises(
      ConfigError, match='were trained for 24x24 images: '
      'pass --config.image_size=24'):
    evaluation.evaluate(workdir, config=config)
  config.model = 'SimpleCNN'  # a config of another model than the run's
  with pytest.raises(
      ConfigError, match=r'--config names model SimpleCNN, '
      r'but .* trained ViT-.*: pass a config of that model'):
    evaluation.evaluate(workdir, config=config)
  with pytest.raises(
      ConfigError, match=r'held out no validation images \(any drawn would '
      r'be ones it trained on\): evaluate --split=test'):
    evaluation.evaluate(workdir, split='validation')


def test_a_run_records_its_classes_for_evaluation_and_its_exports(
    trained_vit_run, tmp_path):
  workdir, data_dir = trained_vit_run
  # The release's names, label i's at [i].
  names = json.loads((workdir / 'classes.json').read_text())
  assert names == list(helpers.CIFAR10_CLASSES)
  # A folder of as many classes, named otherwise: one line, not a number.
  # Fewer training images than the run's batch: evaluation reads none.
  helpers.write_image_folder(tmp_path / 'other', {'train': 1, 'test': 1},
                             classes=[f'kind{i}' for i in range(10)])
  config = helpers.trained_vit_config(data_dir)
  config.update(dataset='image_folder', data_dir=str(tmp_path / 'other'))
  with pytest.raises(
      DatasetError, match=r"trained with label 0 for the class 'airplane', but "
      r"its data names it 'kind0': evaluate it on the classes it was trained "
      r'on, in the order its classes.json lists them'):
    evaluation.evaluate(workdir, config=config)
  # A name of any characters, and a file of another count than the head's.
  run = tmp_path / 'run'
  shutil.copytree(workdir, run)
  (run / 'classes.json').write_text(json.dumps(['a\nb', '\udce9', *names[2:]]))
  assert reading.load(run).class_names == ('a\nb', '\udce9', *names[2:])
  (run / 'classes.json').write_text(json.dumps(names[:2]))
  assert reading.load(run).class_names == ()
  # The exports name the classes as timm and transformers read them.
  export.convert(workdir, tmp_path / 'timm', 'timm')
  export.convert(workdir, tmp_path / 'hf', 'hf')
  timm_config = json.loads((tmp_path / 'timm' / 'config.json').read_text())
  hf_config = json.loads((tmp_path / 'hf' / 'config.json').read_text())
  assert timm_config['label_names'] == names
  assert [hf_config['id2label'][str(i)] for i in range(10)] == names
  assert hf_config['label2id']['cat'] == 3
  # Read back for analyze, a timm name as its description says it; evaluate
  # compares only a run's own names (a hub's describe its labels for people).
  helpers.edit_json(tmp_path / 'timm' / 'config.json',
                    label_descriptions={'cat': 'a small feline'})
  described = (*names[:3], 'a small feline', *names[4:])
  assert reading.load(tmp_path / 'timm').class_names == described
  assert reading.load(tmp_path / 'hf').class_names == tuple(names)
  assert evaluation.evaluate(tmp_path / 'hf', config=config)['examples'] == 10
  # transformers' default names, LABEL_i, name nothing.
  export.convert(run, tmp_path / 'hf_unnamed', 'hf')
  assert reading.load(tmp_path / 'hf_unnamed').class_names == ()


def test_a_run_with_a_moving_average_evaluates_and_reads_back_the_average(
    cifar10_dir, tmp_path, caplog):
  # 96 images: 6 steps an epoch
  config = helpers.tiny_config(cifar10_dir, total_steps=6, ema_decay=0.9)
  caplog.set_level('INFO', logger='absl')  # whatever verbosity a test set
  train.train_and_evaluate(config, tmp_path)
  assert "commands that read this run, use the parameters' moving average" in (
      caplog.text)
  _as_logged(evaluation.evaluate(tmp_path), tmp_path)
  with run_checkpoints.RunCheckpoints(tmp_path / 'checkpoints') as saved:
    state = saved.restore(6).state
  jax.tree.map(np.testing.assert_array_equal,
               reading.load_run(tmp_path).params, state['ema_params'])
  assert not np.array_equal(state['ema_params']['head']['bias'],
                            state['params']['head']['bias'])
  # Fine-tuned with an average of its own, which starts from the run's
  # (the train step donates both copies); the run's steps, so its programs.
  tuned = helpers.tiny_config(cifar10_dir, total_steps=6, ema_decay=0.9,
                              init_from=str(tmp_path))
  assert np.isfinite(
      train.train_and_evaluate(tuned, tmp_path / 'tuned')['best_test_accuracy'])


def test_an_export_evaluates_with_the_normalization_it_states_or_what_it_lacks(
    trained_vit_run, tmp_path):
  workdir, data_dir = trained_vit_run
  npz = tmp_path / 'run.npz'
  export.convert(workdir, npz, 'npz')
  with pytest.raises(ConfigError, match='says nothing of the data: pass '
                     '--config'):
    evaluation.evaluate(npz)
  config = helpers.trained_vit_config(data_dir)
  config.image_size = 32
  with pytest.raises(
      ConfigError, match=r'config.image_size=32, but the position embeddings '
      r'of .* were trained for 24x24 images: pass --config.image_size=24, or '
      '--released_preprocessing'):
    evaluation.evaluate(npz, config=config)
  # An .npz states no normalization: the released models' (pixels in
  # [-1, 1]) at the resolution of the position embeddings.
  result = evaluation.evaluate(npz, config=config, released_preprocessing=True)
  assert result['image_size'] == 24 and result['examples'] == 37
  config.pixel_mean = config.pixel_std = (0.5, 0.5, 0.5)
  for format_name in ('timm', 'hf'):
    export.convert(workdir, tmp_path / format_name, format_name)
    result = evaluation.evaluate(tmp_path / format_name, config=config,
                                 released_preprocessing=True)
    # The run's CIFAR-10 mean and std, from the folder, not the config's.
    _as_logged(result, workdir)

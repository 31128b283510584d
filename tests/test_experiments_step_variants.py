"""experiments/benchmarks/step_variants.py: variants of a train step, each in
a fresh process; one that fails is a row, and the budget stops new runs."""

import json
import sys

import pytest

from experiments.benchmarks import step_variants


def _main(monkeypatch, *flags):
  monkeypatch.setattr(sys, 'argv', ['step_variants.py', *flags])
  step_variants.main()


def test_a_variant_xla_refuses_is_a_row_and_the_others_run(
    monkeypatch, capsys, tmp_path):
  """ViT-B/16's step at --smoke's size; `bad`'s flag is none of XLA's, so
  its process dies starting jax."""
  monkeypatch.setattr(step_variants, 'GPU_VARIANTS', {
      'default': '', 'bad': '--xla_no_such_flag=true'})
  output = tmp_path / 'runs.json'
  _main(monkeypatch, '--gpu', '--smoke', '--rounds=1', '--steps=1',
        f'--output={output}')
  printed = capsys.readouterr().out
  assert 'round 1: bad: failed: exit ' in printed
  assert '| bad | 0 |  |  |' in printed
  default, bad = json.loads(output.read_text())
  assert (default['variant'], default['round']) == ('default', 1)
  assert default['train_images_per_second'] > 0
  assert default['compile_seconds'] > 0
  assert bad['variant'] == 'bad' and 'xla_no_such_flag' in bad['failed']


def test_no_run_starts_once_the_seconds_are_spent(monkeypatch, capsys):
  _main(monkeypatch, '--gpu', '--seconds=-1')
  printed = capsys.readouterr().out
  assert 'round' not in printed
  assert '| default | 0 |  |  |' in printed


def test_an_unknown_variant_is_named_with_the_choices(monkeypatch, capsys):
  with pytest.raises(SystemExit):
    _main(monkeypatch, '--gpu', '--variants=default,cudnn_layernorm')
  error = capsys.readouterr().err
  assert 'unknown variants cudnn_layernorm; use some of default, ' in error

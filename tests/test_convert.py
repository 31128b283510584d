"""python -m vit_jax.convert: the command and its one-line errors."""

import subprocess
import sys

from tests.conftest import ROOT


def _convert(*args):
  return subprocess.run([sys.executable, '-m', 'vit_jax.convert', *args],
                        cwd=ROOT, capture_output=True, text=True, check=False)


def test_converts_a_run_and_says_what_it_wrote(trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  out = _convert(str(workdir), str(tmp_path / 'hf'), '--format=hf')
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.startswith(f'Wrote {tmp_path / "hf"} (hf): ')
  assert sorted(p.name for p in (tmp_path / 'hf').iterdir()) == [
      'config.json', 'model.safetensors', 'preprocessor_config.json']


def test_bad_arguments_and_sources_are_one_line(tmp_path):
  out = _convert(str(tmp_path / 'a.npz'), '--format=npz')
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1].startswith(
      'error: pass SOURCE, DEST and --format')
  (tmp_path / 'weights.safetensors').write_bytes(
      b'\x10\x00\x00\x00\x00\x00\x00\x00{"x": 1}       ')
  out = _convert(str(tmp_path / 'weights.safetensors'), str(tmp_path / 'o'),
                 '--format=timm')
  assert out.returncode == 1 and 'Traceback' not in out.stderr
  assert out.stderr.strip().splitlines()[-1].startswith(
      f'error: {tmp_path / "weights.safetensors"} is not a readable '
      '.safetensors file')

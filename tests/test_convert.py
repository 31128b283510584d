"""python -m vit_jax.convert: one-line errors, and DEST kept on a fault."""

import functools
import shutil
import subprocess

import pytest

from tests import helpers
from vit_jax.checkpoints import export
from vit_jax.errors import CheckpointError

_convert = functools.partial(helpers.run_module, 'vit_jax.convert')


def test_the_command_converts_and_says_bad_input_in_one_line(
    trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  out = _convert(workdir, tmp_path / 'model.npz', '--format=npz', status=0)
  assert out.stdout.startswith(f'Wrote {tmp_path / "model.npz"} (npz): ')
  assert out.stderr == ''  # no library's records
  out = _convert(tmp_path / 'a.npz', '--format=npz', status=1)
  assert out.stderr.strip().splitlines()[-1].startswith(
      'error: pass SOURCE, DEST and --format')
  (tmp_path / 'weights.safetensors'
  ).write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"x": 1}       ')
  out = _convert(tmp_path / 'weights.safetensors', tmp_path / 'o',
                 '--format=timm', status=1)
  assert 'Traceback' not in out.stderr
  assert out.stderr.strip().splitlines()[-1].startswith(
      f'error: {tmp_path / "weights.safetensors"} is not a readable '
      '.safetensors file')


def test_a_full_or_read_only_disk_is_one_line_and_leaves_the_old_export(
    trained_vit_run, tmp_path):
  """A tmpfs with room for one export, then read-only (timm's: as hf's)."""
  workdir, _ = trained_vit_run
  for format_name, dest in (('npz', 'model.npz'), ('hf', 'hf')):
    old = tmp_path / 'old' / dest
    export.convert(workdir, old, format_name)
    size = sum(p.stat().st_size for p in [old, *old.rglob('*')] if p.is_file())
    with helpers.mounted_tmpfs(tmp_path / format_name,
                               f'{size * 3 // 2 // 1024 + 8}k') as disk:
      shutil.copytree(old, disk /
                      dest) if old.is_dir() else shutil.copy(old, disk / dest)
      before = {p: p.read_bytes() for p in disk.rglob('*') if p.is_file()}
      for advice in (f'Free space there (df -h {disk}), or pass another DEST.',
                     f'Check that {disk} is writable, or pass another DEST.'):
        with pytest.raises(CheckpointError) as error:
          export.convert(workdir, disk / dest, format_name)
        assert str(error.value).startswith(f'Writing {disk / dest} failed (')
        assert advice in str(error.value)
        assert sorted(p.name for p in disk.iterdir()) == [dest]  # no partial
        assert {p: p.read_bytes() for p in disk.rglob('*')
                if p.is_file()} == before
        # Then the same on the disk made read-only.
        subprocess.run(['mount', '-o', 'remount,ro', str(disk)], check=True)


def test_a_stop_signal_leaves_dest_as_it_was(trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  # At jax's first record (--verbosity=1): it is reading the run.
  stderr = helpers.interrupted('vit_jax.convert', workdir, tmp_path / 'hf',
                               '--format=hf', '--verbosity=1')
  assert stderr.strip().splitlines()[-1] == (
      'Ctrl-C: stopped the conversion; DEST is as it was.')
  assert not any(tmp_path.iterdir())

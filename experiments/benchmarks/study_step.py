"""What the benchmark scripts share: the study's run, JSON, rounds, flags."""

import argparse
from collections.abc import Iterable
import datetime
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from vit_jax.training import provenance

# The study's command runs from the checkout's root, where its config is.
REPO = pathlib.Path(__file__).resolve().parents[2]


def run(command: list[str], timeout: float | None = None,
        env: dict | None = None) -> tuple[str, str, str]:
  """`command`'s stdout, stderr, and '' or why it failed (timeout, exit)."""
  try:
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=timeout, check=False)
    last = (out.stderr.strip().splitlines() or [''])[-1][:300]
    failed = f'exit {out.returncode}: {last}' if out.returncode else ''
  except subprocess.TimeoutExpired as e:
    out, failed = e, f'over {timeout:.0f} s'
  # A timeout leaves bytes, even with text=True.
  return (*(s.decode(errors='replace') if isinstance(s, bytes) else s or ''
            for s in (out.stdout, out.stderr)), failed)


def run_study(data_dir, overrides: dict, timeout: float | None = None,
              env: dict | None = None) -> dict:
  """`vit_jax.main` of the study with `overrides`: its run, or why it failed."""
  # Here, not above: timm's worker imports this module where numpy may not be.
  from experiments import runs  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as workdir:
    start, workdir = time.time(), pathlib.Path(workdir)
    _, stderr, failed = run([
        sys.executable, '-m', 'vit_jax.main', '--config=configs/cifar_small.py',
        f'--workdir={workdir}', f'--config.data_dir={data_dir}',
        *(f'--config.{k}={v}' for k, v in overrides.items())
    ], timeout, env)
    if failed:
      return {'failed': failed}
    summary = workdir / 'summary.json'
    return dict(summary=runs.read_json(summary), records=runs.history(workdir),
                stderr=stderr, seconds=summary.stat().st_mtime - start)


def write_json(path: pathlib.Path, data: dict):
  """`data` as JSON at `path`, after the date and the machine that measured it."""
  dated = dict(date=datetime.date.today().isoformat(), machine=provenance.cpu())
  path.write_text(json.dumps({**dated, **data}, indent=2))


def rounds(names: Iterable, count: int, first: tuple = ()):
  """(round from 1, name): `first`, then `names`, reversed every other round."""
  names = list(names)
  for index in range(count):
    for name in (*first, *(names[::-1] if index % 2 else names)):
      yield index + 1, name


def parser(doc: str, switches: dict[str, str] | None = None,
           **defaults) -> argparse.ArgumentParser:
  """A parser of `switches` (name: help), `defaults`' flags and `doc`'s lead."""
  parsing = argparse.ArgumentParser(description=doc.split('\n\n')[0])
  for name, help_text in (switches or {}).items():
    parsing.add_argument(f'--{name}', action='store_true', help=help_text)
  for name, default in defaults.items():
    parsing.add_argument(f'--{name}', type=type(default), default=default)
  return parsing

"""Full disks, damaged checkpoints, kills, bad paths: one line, nothing lost."""

import contextlib
import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

from tests import helpers
from tests.test_training_train import final_state
from vit_jax import analyze
from vit_jax.checkpoints import reading
from vit_jax.checkpoints import run_checkpoints
from vit_jax.data import sources
from vit_jax.errors import CheckpointError
from vit_jax.errors import ConfigError
from vit_jax.errors import DatasetError
from vit_jax.errors import TrainingDivergedError
from vit_jax.errors import WorkdirError
from vit_jax.runtime import command
from vit_jax.runtime import distributed
from vit_jax.runtime import preemption
from vit_jax.training import train

_NAMES = {signal.SIGTERM: 'SIGTERM', signal.SIGINT: 'Ctrl-C'}


@pytest.fixture
def run(uninterrupted, tmp_path):
  """A `_Run` of the uninterrupted run's config in `tmp_path / 'run'`."""
  return _Run(*uninterrupted, tmp_path)


class _Run:
  """Processes of `process_test_config` on one workdir, and the run to match."""

  def __init__(self, data_dir, reference, tmp_path):
    self.data_dir, self.reference, self.tmp_path = data_dir, reference, tmp_path
    self.config_file = helpers.write_process_config(tmp_path, data_dir)
    self.workdir = tmp_path / 'run'

  def start(self, log: str, *flags, **kwargs) -> subprocess.Popen:
    return helpers.start_main(self.config_file, self.workdir,
                              self.tmp_path / log, *flags, **kwargs)

  def output(self, log: str) -> str:
    return (self.tmp_path / log).read_text()

  def stop(self, process, signum, log: str) -> tuple[int, str]:
    """Sends `signum`; the exit status (within 60 s) and the output."""
    process.send_signal(signum)
    return process.wait(timeout=60), self.output(log)

  def finish(self, **overrides):
    """Reruns to the end in this process: the uninterrupted run's records."""
    config = helpers.process_test_config(self.data_dir)
    config.update(overrides)
    train.train_and_evaluate(config, self.workdir)
    assert helpers.untimed_history(self.workdir) == helpers.untimed_history(
        self.reference)


def _error_lines(output: str) -> list[str]:
  return [line for line in output.splitlines() if line.startswith('error:')]


# ------------------------------------------------------------ full disk ---


@pytest.mark.slow  # 9 s, root only
def test_a_full_disk_stops_the_run_at_once_in_one_line_and_loses_nothing(
    run, tmp_path):
  with helpers.mounted_tmpfs(tmp_path / 'disk', '32m') as disk:
    run.workdir = disk / 'run'
    process = run.start('log')
    helpers.wait_until((run.workdir / 'checkpoints' / '8').is_dir, 120, process,
                       lambda: run.output('log')[-3000:])
    filler = disk / 'filler'
    with filler.open('wb') as f, contextlib.suppress(OSError):  # until full
      while True:
        f.write(b'\0' * (1 << 20))
        f.flush()
    filled = time.monotonic()
    assert process.wait(timeout=60) == 1
    assert time.monotonic() - filled < 30
    output = run.output('log')
    errors = _error_lines(output)
    assert len(errors) == 1 and errors[0].startswith(
        f'error: Saving a checkpoint in {run.workdir / "checkpoints"} failed (')
    assert 'Free space there' in errors[0]
    assert 'Traceback' not in output
    assert len(output.splitlines()) < 60

    filler.unlink()  # space freed: the rerun resumes and loses nothing
    run.finish()


# ----------------------------------------------------- damaged checkpoints ---


def _largest_file(directory: pathlib.Path) -> pathlib.Path:
  return max((p for p in directory.rglob('*') if p.is_file()),
             key=lambda p: p.stat().st_size)


def _flip_four_bytes(step_dir):
  path = _largest_file(step_dir / 'state')
  with path.open('r+b') as f:
    f.seek(path.stat().st_size // 2)
    word = f.read(4)
    f.seek(-4, os.SEEK_CUR)
    f.write(bytes(b ^ 0xFF for b in word))


def _truncate_data(step_dir):
  path = _largest_file(step_dir / 'state')
  os.truncate(path, path.stat().st_size // 2)


def _delete_manifest(step_dir):
  for path in step_dir.rglob('manifest.ocdbt'):
    path.unlink()


def _delete_metadata(step_dir):
  (step_dir / 'state' / '_METADATA').unlink()


def _truncate_history(step_dir):
  path = step_dir / 'history' / 'metadata'
  os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize('damage', [
    _flip_four_bytes,
    pytest.param(_truncate_data, marks=pytest.mark.slow),
    pytest.param(_delete_manifest, marks=pytest.mark.slow),
    pytest.param(_delete_metadata, marks=pytest.mark.slow),
    pytest.param(_truncate_history, marks=pytest.mark.slow)
], ids=lambda damage: damage.__name__.strip('_'))
def test_a_damaged_latest_checkpoint_is_skipped_and_nothing_is_lost(
    run, damage, caplog):
  shutil.copytree(run.reference, run.workdir)
  damage(run.workdir / 'checkpoints' / '40')

  caplog.set_level('INFO')
  run.finish()
  [warning] = (r.getMessage() for r in caplog.records
               if r.levelname == 'WARNING' and 'Skipping' in r.getMessage())
  assert warning.startswith(
      f'Skipping checkpoint {run.workdir / "checkpoints" / "40"}, which cannot '
      'be restored (')
  assert 'bound method' not in warning  # tensorstore's error, not orbax's
  assert 'Resumed from' in caplog.text and 'at step 36' in caplog.text
  assert (run.workdir / 'checkpoints' / '40.unrestorable').is_dir()


# ------------------------------------------------------------- outputs ---


def test_a_second_run_is_refused_and_the_first_killed_mid_epoch_resumes_identical(
    run, caplog):
  processes = [run.start('log0')]
  time.sleep(0.5)
  processes.append(run.start('log1'))
  helpers.wait_until(lambda: any(p.poll() is not None for p in processes), 300)
  # Whichever reached the lock first runs; the other is refused.
  loser = next(i for i, p in enumerate(processes) if p.poll() is not None)
  winner = processes[1 - loser]
  output = run.output(f'log{loser}')
  assert processes[loser].returncode == 1, output[-3000:]
  assert len(_error_lines(output)) == 1 and _error_lines(output)[0].startswith(
      f'error: The workdir {run.workdir} is in use by another run (process '
      f'{winner.pid} on ')
  assert 'Traceback' not in output

  # 5 steps an epoch: checkpoint 8 is mid-epoch and mid logging interval.
  helpers.wait_for_step(winner, run.workdir, 10)
  winner.send_signal(signal.SIGKILL)
  assert winner.wait() == -signal.SIGKILL
  assert not (run.workdir / 'summary.json').exists()

  caplog.set_level('INFO')
  run.finish()
  assert 'Resumed from' in caplog.text
  jax.tree.map(np.testing.assert_array_equal, final_state(run.workdir, 40),
               final_state(run.reference, 40))
  assert [
      e.step for e in helpers.tensorboard_events(run.workdir)
      for v in e.summary.value if v.tag == 'loss/train'
  ] == [r['step'] for r in helpers.history(run.reference) if 'train_loss' in r]
  for line in (run.workdir / 'metrics.jsonl').read_text().splitlines():
    json.loads(line, parse_constant=pytest.fail)  # strict: no NaN
  assert (run.workdir / 'lock').read_text() == ''  # let go


@pytest.mark.parametrize('split', ['validation', 'test'])
def test_a_diverged_evaluation_loss_stops_and_says_no_checkpoint_exists(
    tmp_path, split):
  with pytest.raises(
      TrainingDivergedError, match=rf'{split} loss became nan by step 3; '
      r'stopped without saving\. No checkpoint had been saved yet: rerun with '
      r'a lower config\.learning_rate'):
    train._check_finite(  # pylint: disable=protected-access
        {'train_loss': 1.0, 'test_loss': 1.0, f'{split}_loss': math.nan}, 3,
        run_checkpoints.RunCheckpoints(tmp_path / 'checkpoints', 2), [])


# ------------------------------------------------- bad workdirs and data ---


def test_the_workdir_and_init_from_are_checked_before_the_data(tmp_path):
  config = helpers.tiny_config(tmp_path / 'no-data')
  (tmp_path / 'file').write_text('')
  with pytest.raises(WorkdirError, match='is a file: pass a directory'):
    train.train_and_evaluate(config, tmp_path / 'file')
  with pytest.raises(WorkdirError,
                     match='Cannot write to the workdir /proc/vit_jax/run'):
    train.train_and_evaluate(config, '/proc/vit_jax/run')
  with pytest.raises(DatasetError, match='does not exist'):
    train.train_and_evaluate(config, tmp_path / 'run')
  config.init_from = str(tmp_path / 'absent.npz')
  # The rest of the line: test_runtime_command's missing checkpoint.
  with pytest.raises(
      ConfigError, match=r"^config\.init_from='.*absent.npz': "
      r'.*absent.npz does not exist: pass a vit_jax.main'):
    train.train_and_evaluate(config, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()


def test_a_data_file_or_directory_that_cannot_be_read_is_named(tmp_path):
  (tmp_path / 'data').write_text('')
  with pytest.raises(DatasetError, match=r'data directory .*/data is a file'):
    sources.open_dataset(helpers.tiny_config(tmp_path / 'data'))
  folder = helpers.cifar10_release(tmp_path / 'cifar', 10,
                                   2) / 'cifar-10-batches-bin'
  if os.geteuid() != 0:  # root reads any file
    (folder / 'test_batch.bin').chmod(0)
    with pytest.raises(
        DatasetError, match=r'Cannot read .*test_batch.bin: Permission denied'):
      sources.open_dataset(helpers.tiny_config(folder.parent))
    (folder / 'test_batch.bin').chmod(0o644)
  os.truncate(folder / 'data_batch_1.bin', 3073 + 100)
  with pytest.raises(DatasetError, match=r'data_batch_1.bin is not a CIFAR '
                     r'binary file'):
    sources.open_dataset(helpers.tiny_config(folder.parent))


class _Exploit:

  def __reduce__(self):
    return (os.system, ('touch pwned',))


def test_a_crafted_cifar_pickle_is_refused_unrun(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  names = [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']
  helpers.write_cifar_python(
      tmp_path / 'cifar-10-batches-py',
      dict.fromkeys(names, helpers.random_cifar(2, 10, 1)),
      extra={b'extra': _Exploit()})
  with pytest.raises(
      DatasetError, match=r'data_batch_1 is not a CIFAR python '
      r'batch: it refers to posix.system'):
    sources.open_dataset(helpers.tiny_config(tmp_path))
  assert not (tmp_path / 'pwned').exists()


# -------------------------------------------------------- stop signals ---


def _assert_stopped_cleanly(status: int, output: str):
  assert status == preemption.PREEMPTED_EXIT_STATUS, output[-3000:]
  assert 'Traceback' not in output and not _error_lines(output)


@pytest.mark.parametrize('at_start_up, while_training', [
    (signal.SIGTERM, signal.SIGINT),
    pytest.param(signal.SIGINT, signal.SIGTERM, marks=pytest.mark.slow)
], ids=['SIGTERM-then-Ctrl-C', 'Ctrl-C-then-SIGTERM'])
def test_a_stop_signal_saves_what_was_done_exits_75_and_the_rerun_ends_identical(
    run, at_start_up, while_training):
  """During start-up nothing is saved; while training, the step reached."""
  # The signal's step is the newest checkpoint: none is scheduled before
  # step 100, or (Ctrl-C) none after the first epoch's until the run ends.
  overrides = (dict(
      checkpoint_every_steps=100) if while_training == signal.SIGTERM else dict(
          checkpoint_every_steps=0, checkpoint_min_seconds=1e9))
  flags = [f'--config.{name}={value}' for name, value in overrides.items()]
  name = _NAMES[at_start_up]
  reached = False  # whether any attempt ran the command's first line
  for attempt, delay in enumerate((0.3, 3.5)):
    process = run.start(f'start_up{attempt}', *flags)
    time.sleep(delay)
    status, output = run.stop(process, at_start_up, f'start_up{attempt}')
    if status == -at_start_up and not output:
      # Before Python ran the command's first line (a loaded machine starts
      # slowly): killed as any program is, with nothing written.
      assert not run.workdir.exists()
      continue
    reached = True
    if status == 0:  # through start-up at this machine's speed
      run.workdir = run.tmp_path / 'trained'
      break
    _assert_stopped_cleanly(status, output)
    if f'Preempted ({name}): saved a checkpoint' in output:
      run.workdir = run.tmp_path / 'trained'
      break
    assert f'Preempted ({name}): stopped before training' in output
    assert not helpers.steps_saved(run.workdir)
  assert reached, 'no attempt reached the command\'s first line'

  name = _NAMES[while_training]
  process = run.start('log', *flags)
  helpers.wait_for_step(process, run.workdir, 5)
  signalled = time.monotonic()
  status, output = run.stop(process, while_training, 'log')
  assert time.monotonic() - signalled < 30
  _assert_stopped_cleanly(status, output)
  saved = helpers.steps_saved(run.workdir)
  assert 5 <= saved[-1] < 40 and saved[:-1] in ([], [5])
  assert f'{name}: stopping once the steps in flight are saved' in output
  assert 'before training' not in output  # it was training
  assert (f'Preempted ({name}): saved a checkpoint of step {saved[-1]} in '
          f'{run.workdir / "checkpoints"} and stopped; rerun the same command '
          'to resume.') in output
  run.finish(**overrides)


@pytest.mark.slow  # 11 s
def test_a_second_ctrl_c_exits_at_once_and_the_rerun_clears_what_it_left(run):
  process = run.start('log')
  helpers.wait_for_step(process, run.workdir, 10)
  process.send_signal(signal.SIGINT)
  time.sleep(0.01)  # the step in flight, or its save
  status, output = run.stop(process, signal.SIGINT, 'log')
  assert 'Traceback' not in output
  if status == preemption.PREEMPTED_EXIT_STATUS:  # saved before the second
    pytest.skip('the first Ctrl-C finished its save within 10 ms')
  assert status == 130
  assert _error_lines(output) == [
      'error: Interrupted again: stopped at once, without saving; rerun the '
      'same command to resume from the newest complete checkpoint.'
  ]
  run.finish()
  assert not [
      p.name for p in run.workdir.rglob('*')
      if 'tmp' in p.name or p.name.endswith('.partial')
  ]


@pytest.mark.slow  # 13 s
def test_sigterm_to_the_process_group_with_input_workers_saves_and_exits_75(
    run):
  """SLURM signals every process of a job step: the grain workers too."""
  process = run.start('log', '--config.input_pipeline=streaming',
                      '--config.input_workers=2',
                      '--config.checkpoint_every_steps=100', new_session=True)
  helpers.wait_for_step(process, run.workdir, 5)
  os.killpg(process.pid, signal.SIGTERM)
  _assert_stopped_cleanly(process.wait(timeout=60), run.output('log'))
  assert 'Preempted (SIGTERM): saved a checkpoint of step' in run.output('log')


# ------------------------------------------------- two-process jobs ---


@pytest.mark.slow  # 45 s
def test_a_resumed_two_process_job_signalled_at_start_up_stops_before_training(
    run):
  """jax's preemption service counts calls, not steps: both stop unsaved."""
  # No checkpoint or evaluation soon.
  job = (run.config_file, run.workdir, run.tmp_path,
         '--config.total_steps=2000', '--config.checkpoint_every_steps=5000',
         '--config.eval_every_steps=5000')
  processes, logs = helpers.start_two_processes(*job)
  helpers.wait_for_step(processes[0], run.workdir, 6)
  processes[1].send_signal(signal.SIGTERM)
  assert helpers.wait_all(processes,
                          timeout=120) == [preemption.PREEMPTED_EXIT_STATUS] * 2
  saved = helpers.steps_saved(run.workdir)
  assert len(saved) == 1

  processes, logs = helpers.start_two_processes(*job)
  time.sleep(1.0)  # process 1 is starting: importing jax, or joining the job
  processes[1].send_signal(signal.SIGTERM)
  assert helpers.wait_all(processes,
                          timeout=120) == [preemption.PREEMPTED_EXIT_STATUS
                                          ] * 2, logs[0].read_text()[-3000:]
  for log in logs:
    assert (f'stopped before training, with nothing new to save (the '
            f'checkpoint of step {saved[0]} in {run.workdir / "checkpoints"} '
            'is kept)') in log.read_text()
  assert helpers.steps_saved(run.workdir) == saved


# What process 1 of a job sees otherwise (its sitecustomize.py changes it),
# the job's flags, and the line each process ends with.
_R = ('from vit_jax.checkpoints.run_checkpoints import RunCheckpoints as R\n'
      'steps, read = R.steps, R._restore\n')
_LISTED = ('list other checkpoints in {workdir}/%s than process 0 (process '
           '{process_id} lists steps {steps}): ' +
           distributed.SEE_THE_SAME_FILES)
# yapf: disable
_SEEN_OTHERWISE = {
    'a stale checkpoint listing': (
        _R + 'R.steps = lambda *a, **k: steps(*a, **k)[:-1]', [],
        _LISTED % 'checkpoints'),
    'a stale best checkpoint listing': (
        _R + 'R.steps = lambda s, *a, **k: steps(s, *a, **k) + [4] * '
        "(s.directory.name == 'best_checkpoint')",
        ['--config.keep_best_checkpoint=True'], _LISTED % 'best_checkpoint'),
    'a read error': (
        _R + 'R._restore = lambda s, i, *a: read(s, i - (i == max(s.steps()))'
        ' * 10**6, *a)', [], 'restored another checkpoint from {workdir}/'
        'checkpoints than process 0 (process {process_id} restored step '
        '{step}): ' + distributed.SEE_THE_SAME_FILES),
    'a stale config.json': (
        'from vit_jax.runtime import files\nfiles.read_json = lambda p, r='
        "files.read_json: (None, '') if p.name == 'config.json' else r(p)", [],
        'read another {workdir}/config.json than process 0: ' +
        distributed.SEE_THE_SAME_FILES),
    'another init_from file': (
        'import jax\nfrom vit_jax.training import finetune as f\n'
        'read = f._read\nf._read = lambda c: jax.tree.map(lambda x: x + 1, '
        'read(c))', ['--config.init_from={reference}'],
        'read other values from config.init_from={reference} than process 0: '
        'every host must read the same files (a shared filesystem without '
        'stale caches, or identical copies). Start the job again.'),
    'another label streamed': (
        'import dataclasses\nimport numpy as np\n'
        'from vit_jax.data import sources\n'
        'def moved(config, *a, open_dataset=sources.open_dataset, **k):\n'
        '  d = open_dataset(config, *a, **k); labels = np.array(d.train.labels)\n'
        '  labels[40] = (labels[40] + 1) % 10; return dataclasses.replace(d, '
        'train=dataclasses.replace(d.train, labels=labels))\n'
        'sources.open_dataset = moved', ['--config.input_pipeline=streaming'],
        'read a different dataset, or shuffle it differently, than process 0: '
        'give every process the same data (config.data_dir on a shared '
        'filesystem or identical copies) and the same numpy version.'),
    'another config': (
        "sys.argv.append('--config.learning_rate=0.5')", [],
        'run another config or commit than process 0: start every process '
        'with the same flags, from the same checkout.'),
}
# yapf: enable


@pytest.mark.slow  # 25 s each
@pytest.mark.parametrize('seen', _SEEN_OTHERWISE)
def test_a_host_that_sees_otherwise_stops_the_job_in_one_line_before_it_trains(
    run, monkeypatch, seen):
  """Where replicas would train apart, or wait on each other for ever."""
  on_process_1, flags, said = _SEEN_OTHERWISE[seen]
  if '{workdir}/c' in said:  # of its checkpoints or config.json: resumes
    shutil.copytree(run.reference, run.workdir)
  saved = helpers.steps_saved(run.workdir)
  (run.tmp_path / 'sitecustomize.py'
  ).write_text("import sys\nif '--process_id=1' in sys.argv:\n" +
               ''.join(f'  {line}\n' for line in on_process_1.splitlines()))
  monkeypatch.setenv('PYTHONPATH', str(run.tmp_path))
  processes, logs = helpers.start_two_processes(
      run.config_file, run.workdir, run.tmp_path,
      *(flag.format(reference=run.reference) for flag in flags))
  assert helpers.wait_all(processes, timeout=120) == [1, 1]
  for process_id, log in enumerate(logs):
    # Process 1 lists or restores a step less, or lists best step 4 more.
    steps = saved[:-1] or [4] if process_id else saved
    assert _error_lines(log.read_text()) == [
        'error: Process(es) [1] ' + said.format(
            workdir=run.workdir, reference=run.reference, process_id=process_id,
            steps=steps, step=steps and steps[-1])
    ]
  assert helpers.steps_saved(run.workdir) == saved


@pytest.mark.slow  # 25 s
def test_a_process_that_fails_at_the_end_fails_every_process(run, monkeypatch):
  """Process 0 cannot write the summary: no process says that the job ended."""
  (run.tmp_path / 'sitecustomize.py').write_text(
      "import sys\nif '--process_id=0' in sys.argv:\n"
      '  from vit_jax.runtime import files\n  write = files.write_json\n'
      '  def full(path, *args, **kwargs):\n'
      "    if path.name == 'summary.json': raise OSError(28, 'No space left')\n"
      '    return write(path, *args, **kwargs)\n  files.write_json = full\n')
  monkeypatch.setenv('PYTHONPATH', str(run.tmp_path))
  processes, logs = helpers.start_two_processes(run.config_file, run.workdir,
                                                run.tmp_path)
  assert helpers.wait_all(processes, timeout=120) == [1, 1]
  assert _error_lines(logs[1].read_text())[0].startswith(
      'error: Process 1 of 2 lost process 0 (the coordinator) of the job')
  assert not (run.workdir / 'summary.json').exists()


# ---- readers verify; config.json; init_from ----


def test_readers_skip_a_damaged_newest_checkpoint_and_refuse_a_run_without_one(
    run, caplog):
  """As analyze and fine-tuning (init_from) read a run."""
  workdir = shutil.copytree(run.reference, run.workdir)
  checkpoints = workdir / 'checkpoints'
  _flip_four_bytes(checkpoints / '40')
  out = helpers.run_module('vit_jax.analyze', f'--workdir={workdir}',
                           f'--out={run.tmp_path / "out"}', '--num_images=2',
                           '--distance_images=8', '--components=3',
                           env={**os.environ, 'JAX_PLATFORMS': 'cpu'}, status=0)
  warnings = [line for line in out.stderr.splitlines() if 'Skipping' in line]
  assert len(warnings) == 1 and (
      f'Skipping checkpoint {checkpoints / "40"}, which cannot be restored '
      '(DigestMismatchError: ') in warnings[0]
  assert len(out.stderr.strip().splitlines()) == 1  # nothing else
  assert json.loads(
      (run.tmp_path / 'out' / 'analysis.json').read_text())['step'] == 36

  _flip_four_bytes(checkpoints / '36')
  refused = (f'None of the checkpoints in {checkpoints} (steps 36, 40) can be '
             'restored; the warnings above say why.')
  with pytest.raises(CheckpointError) as refused_analysis:
    analyze.analyze(run.tmp_path / 'out2', workdir=workdir, num_images=2,
                    distance_images=8, components=3)
  assert str(refused_analysis.value) == refused
  assert caplog.text.count('Skipping checkpoint') == 2
  assert not (run.tmp_path / 'out2').exists()
  # Data that does not exist: had it been read first, its error would show.
  config = helpers.process_test_config(run.tmp_path / 'no-data')
  config.init_from = str(workdir)
  with pytest.raises(ConfigError) as refused_init:
    train.train_and_evaluate(config, run.tmp_path / 'finetuned')
  assert str(refused_init.value) == f"config.init_from='{workdir}': {refused}"
  assert not (run.tmp_path / 'finetuned').exists()


@pytest.mark.slow  # 27 s
def test_a_reader_of_a_live_run_never_calls_a_rotated_checkpoint_damaged(
    run, caplog):
  """A run keeping one checkpoint, saved every step, read as evaluate does."""
  process = run.start('log', '--config.checkpoint_every_steps=1',
                      '--config.keep_checkpoints=1', '--config.total_steps=24')
  helpers.wait_for_step(process, run.workdir, 3)
  caplog.set_level('WARNING')
  steps, in_progress = [], 0
  while process.poll() is None:
    try:
      steps.append(reading.load_run(run.workdir).step)
    except CheckpointError as e:
      assert 'were deleted while they were read: a run still writing' in (
          str(e)), e
      in_progress += 1
  assert process.wait() == 0, run.output('log')[-3000:]
  # What a command shows of them (orbax's warnings and its background
  # reads' tracebacks are not).
  assert [
      r.getMessage() for r in caplog.records if command._quiet_libraries(r)
  ] == []  # pylint: disable=protected-access
  assert steps == sorted(steps) and len(steps) >= 3, (steps, in_progress)


def test_a_lost_config_json_is_rebuilt_and_another_config_still_refused(run):
  """Rebuilt as test_checkpoints_reading shows; the run checked against it."""
  workdir = shutil.copytree(run.reference, run.workdir)
  (workdir / 'config.json').unlink()
  with pytest.raises(
      ConfigError, match=rf'^{workdir} holds a run with another '
      r'config.batch_size \(16 there, 32 here\)'):
    run.finish(batch_size=32)
  run.finish()

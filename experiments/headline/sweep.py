"""The headline's runs, stage by stage, a command a line (README.md here)."""

import argparse
import pathlib
import shlex
import sys

from experiments import runs
from experiments.data_efficiency import recipes as r
from experiments.data_efficiency import sweep as data_efficiency

EPOCHS = 100
# Candidates: data_efficiency's top rows at 100 epochs (ranked there on the
# test split); the summary and stage 3 choose among them on validation.
VITS = data_efficiency.TOP_VIT
CNNS = [r.TEACHERS['resnet_teacher'], ('simple_cnn', ('trivial_augment',))]
CANDIDATES = [('vit', vit) for vit in VITS] + CNNS
# What a CNN teaches a ViT recipe: gone from the no-CNN control.
_FROM_A_CNN = ('distillation', 'locality_guidance', 'resnet_teacher')
_TEACHERS = {'distillation_teacher', 'locality_guidance_teacher'}
# Stage 4's test sets, each reported run evaluated on them into
# `<name>.json` (its own summary holds the first), and the ViT's class head
# alone into `class_head_<name>.json`.
STUDY_TEST = 'test_1000'  # the study's, as the JPEG copy has them
STUDY_TEST_EXACT = 'test_1000_exact'  # the same images, pixel-exact
JPEG_TEST = 'test_10000'  # all of the JPEG copy's
CLASS_HEAD_PREFIX = 'class_head_'


def stage_runs(stage: int, seeds: list[int], choose_on: list[int],
               workdir: pathlib.Path) -> list[tuple]:
  """Stage 1's runs (those others read), 2's (the rest) or 3's (controls)."""
  if stage == 3:  # the no-CNN ViT's seeds, then the longer FLOPs-matched CNN's
    rows = reported(workdir, seeds, choose_on)
    return rows['no_cnn_vit'] + rows['flops_matched_cnn']
  planned = [(*row, EPOCHS, seed) for seed in seeds if seed in choose_on
             for row in CANDIDATES]
  if any(seed not in choose_on for seed in seeds):
    vit, cnn, _ = choices(workdir, choose_on)
    planned += [(*row, EPOCHS, seed) for seed in seeds if seed not in choose_on
                for row in (('vit', vit), cnn)]
  read = r.read_by(planned)
  return read if stage == 1 else [run for run in planned if run not in read]


def _summary(workdir: pathlib.Path, run: tuple) -> dict:
  require(workdir, [run], 'runs read', 'run stages 1 and 2 first')
  return runs.read_json(workdir / r.run_name(*run) / 'summary.json')


def require(workdir: pathlib.Path, planned: list[tuple], what: str, fix: str,
            file: str = 'summary.json'):
  """One `error:` line, saying `fix`, when a run of `planned` lacks `file`."""
  absent = lambda run: not (workdir / r.run_name(*run) / file).exists()
  if missing := list(filter(absent, planned)):
    sys.exit(f'error: {len(missing)} of the {len(planned)} {what} have no '
             f'{file} in {workdir} (one: {r.run_name(*missing[0])}): {fix}.')


def chain(run: tuple) -> list[tuple]:
  """The runs `run` reads, then `run`: all that trains its model."""
  return r.read_by([run]) + [run]


def flops_matched(workdir: pathlib.Path, vit: tuple[str, ...],
                  cnn: tuple[str, tuple[str, ...]], seed: int) -> int:
  """The CNN's epochs whose FLOPs equal the ViT chain's of `seed`."""
  flops = lambda run: _summary(workdir, run)['train_flops']
  per_epoch = flops((*cnn, EPOCHS, seed)) / EPOCHS
  return round(sum(map(flops, chain(('vit', vit, EPOCHS, seed)))) / per_epoch)


def choices(workdir: pathlib.Path, choose_on: list[int]) -> tuple:
  """The ViT recipe and CNN chosen on `choose_on`, and the ViT without a CNN."""
  candidates = [(*row, EPOCHS, seed) for seed in choose_on
                for row in CANDIDATES]
  seeds = ','.join(map(str, choose_on))
  require(
      workdir, candidates, f'candidate runs of --choose_on={seeds}',
      f'run stages 1 and 2 of --seeds={seeds} first (the other seeds read the '
      'choice they make), or gather their summaries there')
  # Each candidate's validation accuracy, summed over the seeds.
  score = lambda row: sum(
      _summary(workdir, (*row, EPOCHS, seed))['best_validation_accuracy']
      for seed in choose_on)
  vit = max(VITS, key=lambda v: score(('vit', v)))
  no_cnn = tuple(i for i in vit if i not in _FROM_A_CNN)
  return vit, max(CNNS, key=score), no_cnn


def run_overrides(args: argparse.Namespace, run: tuple) -> dict:
  """data_efficiency's overrides of `run`, on JPEGs, choosing on validation."""
  # The study's images as the JPEG copy has them, as the validation and test
  # images are: a model trained on the exact pixels meets a shift there that
  # cost the SmallResNet more than a ViT (README.md).
  changes = data_efficiency.overrides(args.workdir, args.study, *run)
  changes['dataset'] = 'image_folder'
  # A pre-training, which fine-tuning reads at its last step, holds no
  # validation out: it would choose nothing, for an encoder pass over 5,000
  # images of all their patches every epoch.
  model, ingredients, epochs, _ = run
  if r.PRETRAINING not in ingredients:
    # Stage 4 evaluates each reported run at the state validation chose.
    changes.update(validation_examples=5000, validation_dir=args.validation_dir,
                   keep_best_checkpoint=True)
    if epochs > EPOCHS:  # the FLOPs-matched CNN
      # EPOCHS evaluations and logged records, as a row of EPOCHS epochs has
      # (and the last step's): its best is chosen among as many states, its
      # time goes to training rather than to 6,000 images evaluated each
      # epoch, and its committed metrics stay as small.
      batch = r.recipe_config(model, ingredients, epochs).batch_size
      every = epochs * (r.TRAIN_EXAMPLES // batch) // EPOCHS
      changes.update(eval_every_steps=every, log_every_steps=every)
  if _TEACHERS & set(changes):
    # The teacher as its row reports it: at the epoch validation chose.
    changes['teacher_checkpoint'] = 'best'
  return changes


def reported(workdir: pathlib.Path, seeds: list[int],
             choose_on: list[int]) -> dict[str, list[tuple]]:
  """Each row's runs; a FLOPs-matched CNN's once its seed's chains finished."""
  vit, cnn, no_cnn = choices(workdir, choose_on)
  at_seeds = lambda *row: [(*row, EPOCHS, seed) for seed in seeds]
  # A FLOPs-matched run's epochs are known once its seed's chains finish.
  known = lambda seed: all(
      runs.finished(workdir / r.run_name(*run))
      for run in chain(('vit', vit, EPOCHS, seed)) + [(*cnn, EPOCHS, seed)])
  matched = [(*cnn, flops_matched(workdir, vit, cnn, seed), seed)
             for seed in seeds if known(seed)]
  return dict(vit=at_seeds('vit', vit), cnn=at_seeds(*cnn),
              no_cnn_vit=at_seeds('vit', no_cnn), flops_matched_cnn=matched)


def evaluations(workdir: pathlib.Path, seeds: list[int],
                choose_on: list[int]) -> list[tuple[tuple, str]]:
  """Stage 4's (run, name): the reported runs on JPEG, then the ViT's head."""
  rows = reported(workdir, seeds, choose_on)
  every = [run for planned in rows.values() for run in planned]
  return [(run, name) for name in (STUDY_TEST_EXACT, JPEG_TEST) for run in every
         ] + [(run, CLASS_HEAD_PREFIX + name)
              for name in (STUDY_TEST, STUDY_TEST_EXACT, JPEG_TEST)
              for run in rows['vit']]


def evaluated(workdir: pathlib.Path, run: tuple, name: str) -> dict | None:
  """Stage 4's evaluation `name` of `run`, None unless of its best state."""
  directory = workdir / r.run_name(*run)
  path, summary = directory / f'{name}.json', directory / 'summary.json'
  if not (path.exists() and summary.exists()):
    return None
  evaluation, best = runs.read_json(path), runs.read_json(summary)['best_step']
  # A run trained again may choose the same step: an evaluation older than
  # the state it names is not of that state.
  state = directory / 'best_checkpoint' / str(best)
  older = state.exists() and path.stat().st_mtime < state.stat().st_mtime
  return None if older or evaluation.get('step') != best else evaluation


def evaluation_command(run: pathlib.Path, name: str, jpeg: str,
                       exact: str) -> str:
  """`run`'s best state evaluated on test set `name`, into `run/name.json`."""
  test_set = name.removeprefix(CLASS_HEAD_PREFIX)
  data = {
      STUDY_TEST_EXACT: ['--config.dataset=cifar10', f'--data_dir={exact}'],
      JPEG_TEST: [f'--data_dir={jpeg}', '--config.test_examples=0']
  }
  evaluate = shlex.join([
      'python', '-m', 'vit_jax.evaluate',
      f'--checkpoint={run / "best_checkpoint"}', '--split=test',
      *(['--class_head'] if test_set != name else []), *data.get(test_set, [])
  ])
  out, json_file = (shlex.quote(str(run / f'{name}.{suffix}'))
                    for suffix in ('out', 'json'))
  return (f'{evaluate} > {out} && tail -n 1 {out} > {json_file}.tmp && '
          f'mv {json_file}.tmp {json_file}')


def add_seed_flags(parser: argparse.ArgumentParser):
  """--seeds, the seeds run, and --choose_on, those choosing the rows."""
  parser.add_argument('--seeds', type=runs.integers, default='0,1,2,3,4')
  parser.add_argument(
      '--choose_on', type=runs.integers, default='0,1',
      help='The seeds whose candidates\' validation accuracy, summed, '
      'chooses the ViT and the CNN; any other seed reads the choice from '
      'their summary.json files in --workdir.')


def main(argv=None):
  parser = runs.parser(__doc__, '/tmp/headline', 'data_dir', 'slurm',
                       'validation_dir')
  parser.add_argument('--stage', type=int, choices=(1, 2, 3, 4), required=True)
  parser.add_argument(
      '--study', required=True, help="The study's images as the JPEG copy "
      'has them, which every run trains on (experiments.held_out --study).')
  parser.add_argument(
      '--jpeg', required=True, help='The unpacked JPEG copy of CIFAR-10, '
      'whose test/ holds the 10,000 test images stage 4 evaluates on.')
  add_seed_flags(parser)
  args = parser.parse_args(argv)
  workdir, seeds, choose_on = args.workdir, args.seeds, args.choose_on
  folder = lambda run: workdir / r.run_name(*run)
  if args.stage == 4:
    due = [(run, name) for run, name in evaluations(workdir, seeds, choose_on)
           if evaluated(workdir, run, name) is None]
    # A run finished here, its best state beside its summary, is evaluated.
    here = lambda f: runs.finished(f) and (f / 'best_checkpoint').is_dir()
    left_out = {folder(run).name: '' for run, _ in due if not here(folder(run))}
    why = ('without a summary.json and best_checkpoint/ here, unfinished or '
           'trained elsewhere')
    commands = [
        evaluation_command(folder(run), name, args.jpeg, args.data_dir)
        for run, name in due if folder(run).name not in left_out
    ]
  else:
    # A finished run, here or gathered from another machine, is not run again;
    # nor one that reads a run cut short, failed or yet to run.
    planned = stage_runs(args.stage, seeds, choose_on, workdir)
    due = [run for run in planned if not runs.finished(folder(run))]
    # A run's summary.json, {} while unfinished: no unfinished run is stale.
    summary = lambda name: (runs.read_json(workdir / name / 'summary.json')
                            if runs.finished(workdir / name) else {})
    names = [folder(run).name for run in planned]
    stale = {n: why for n in names if (why := runs.read_again(summary, n))}
    if stale:  # the trainer would find it finished, and train nothing
      one = min(stale)
      sys.stderr.write(
          f'Stale: {len(stale)} finished run(s) of this stage read a run '
          f'unfinished or trained again since (one: {one}, as {stale[one]}): '
          'delete their folders and run this stage again.\n')
    left_out = {
        folder(run).name: f', which reads {folder(source).name}' for run in due
        for source in r.read_by([run]) if not runs.finished(folder(source))
    }
    why = 'that read a run not finished here'
    commands = [
        runs.command(folder(run), f'configs/data_efficient.py:{run[0]}',
                     run_overrides(args, run)) for run in due
        if folder(run).name not in left_out
    ]
  if left_out:
    one, plural = min(left_out), 's' * (len(left_out) != 1)
    sys.stderr.write(f'Left out: {len(left_out)} run{plural} {why} (one: {one}'
                     f'{left_out[one]}).\n')
  runs.emit(commands, args.slurm)


if __name__ == '__main__':
  main()

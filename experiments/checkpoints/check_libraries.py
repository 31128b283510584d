"""Our timm and transformers files against the libraries (README.md)."""

import datetime
import json
import pathlib
import subprocess
import sys
import tempfile

from absl import app
from absl import flags
import flax
import jax
import numpy as np

from experiments import runs
from vit_jax import models
from vit_jax.checkpoints import export
from vit_jax.checkpoints import reading
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file
from vit_jax.runtime import files
from vit_jax.runtime import stop_signals

HERE = pathlib.Path(__file__).resolve().parent
FLAGS = flags.FLAGS
flags.DEFINE_string(
    'torch_python', None, 'Python of a venv with torch, timm, transformers and '
    'safetensors, which runs library_worker.py.', required=True)
flags.DEFINE_string('output', str(HERE / 'library_check.json'),
                    'Where the JSON record goes.')

IMAGE_SIZE = 224
NUM_IMAGES = 4
TARGET = 1e-5
# name: (registered model, overrides, formats).
OURS = {
    'ViT-B_16':
        ('ViT-B_16', {'num_classes': 1000}, ('timm', 'hf')), 'ViT-Ti_16 gap':
            ('ViT-Ti_16', {'num_classes': 10, 'classifier': 'gap'}, ('timm',)),
    'ViT-S_32': ('ViT-S_32', {'num_classes': 100}, ('timm', 'hf')),
    'R50+ViT-B_16': ('R50+ViT-B_16', {'num_classes': 1000}, ('timm',)),
}
OFFICIAL_STEM = "with the official stem's epsilons"
LIBRARY = {'timm': 'timm', 'hf': 'transformers'}


def random_params(model, seed: int) -> dict:
  """`model`'s parameters, each drawn at random (none zero or one)."""
  rng = np.random.default_rng(seed)

  def draw(path, leaf):
    noise = rng.standard_normal(leaf.shape).astype(np.float32)
    norm = getattr(path[-1], 'key', str(path[-1])) == 'scale'  # a LayerNorm's
    return 1 + np.float32(0.1) * noise if norm else np.float32(0.02) * noise

  return jax.tree_util.tree_map_with_path(
      draw, params_lib.param_shapes(model, IMAGE_SIZE))


def relative(ours: np.ndarray, theirs: np.ndarray,
             reference: np.ndarray) -> dict:
  difference = np.abs(ours - theirs)  # float64, as `logits_of` gives them
  scale = float(np.abs(reference).max())
  return dict(
      max_rel_diff=float(difference.max()) / scale,
      max_abs_diff=float(difference.max()), max_abs_reference=scale,
      top1_agree=int((np.argmax(ours, -1) == np.argmax(theirs, -1)).sum()))


def logits_of(model, variables, images) -> np.ndarray:
  return np.asarray(
      jax.jit(lambda v, x: model.apply(v, x, train=False))(variables, images),
      np.float64)


def float32_rounding(model, params: dict, images: np.ndarray) -> float:
  """How far float32 moves `model`'s logits from float64's."""
  with jax.enable_x64(True):
    ours = logits_of(model, {'params': params}, images)
    exact = logits_of(
        model.clone(dtype=np.float64),
        {'params': jax.tree.map(lambda x: np.asarray(x, np.float64), params)},
        images.astype(np.float64))
  return relative(ours, exact, exact)['max_rel_diff']


def main(argv):
  del argv
  output = pathlib.Path(FLAGS.output)
  stop_signals.catch(at_once=f'stopped the check; {output} is as it was')
  with stop_signals.not_stopped_within():  # not made and left behind
    tmp = tempfile.TemporaryDirectory(prefix='library_check_',
                                      ignore_cleanup_errors=True)
    stop_signals.remove_on_stop(tmp.name)
  with tmp:
    record = check(pathlib.Path(tmp.name))
  files.write_atomically(output, json.dumps(record, indent=2) + '\n')
  print(table(record))
  print(f'\nWrote {output}.')


def check(tmp: pathlib.Path) -> dict:
  images = np.random.default_rng(0).uniform(
      -1, 1, (NUM_IMAGES, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
  safetensors_file.write(tmp / 'images.safetensors', {'images': images})

  ours, exports, converted, rounding = {}, [], {}, {}
  for seed, (name, (registered, overrides, formats)) in enumerate(OURS.items()):
    model = models.create_model(registered, **overrides)
    params = random_params(model, seed + 1)
    npz_path = tmp / f'{registered}.npz'
    npz.save_npz(params, npz_path)
    ours[name] = logits_of(model, {'params': params}, images)
    request = {'name': name, 'hybrid': model.resnet_stages is not None}
    if request['hybrid']:
      rounding[name] = float32_rounding(model, params, images)
    for format_name in formats:
      folder = tmp / f'{registered}_{format_name}'
      converted[f'{name} {format_name}'] = export.convert(
          npz_path, folder, format_name)
      request[format_name] = str(folder)
    exports.append(request)
    print(f'ours: {name} exported', flush=True)

  request = dict(images=str(tmp / 'images.safetensors'), exports=exports,
                 native_dir=str(tmp / 'native'))
  command = [FLAGS.torch_python, str(HERE / 'library_worker.py')]
  out = subprocess.run(command, input=json.dumps(request),
                       stdout=subprocess.PIPE, text=True, check=False,
                       cwd=runs.REPO)  # its stderr: ours
  if out.returncode:
    sys.exit(f'error: {" ".join(command)} failed (exit status '
             f'{out.returncode}); its output is above.')
  answer = json.loads(out.stdout.strip().splitlines()[-1])

  rows = []
  for name, results in answer['exports'].items():
    for format_name in [f for f in ('timm', 'hf') if f in results]:
      variants = {
          'tanh GELU, eps 1e-6 (as exported)': format_name,
          'exact GELU': f'{format_name}_exact_gelu',
          'LayerNorm eps 1e-12': f'{format_name}_eps_1e-12',
          OFFICIAL_STEM: f'{format_name}_official_stem'
      }
      row = dict(
          direction='out', model=name, library=LIBRARY[format_name], loaded_as={
              key: {k: v for k, v in results[key].items() if k != 'logits'}
              for key in variants.values() if key in results
          }, convert=converted[f'{name} {format_name}'])
      for variant, key in variants.items():
        if key in results:
          row[variant] = relative(ours[name], np.array(results[key]['logits']),
                                  ours[name])
      if OFFICIAL_STEM in row:
        row['float32_rounding'] = rounding[name]
      rows.append(row)

  for name, native in answer['natives'].items():
    loaded = reading.load(native['dir'])
    model, theirs = loaded.model, np.array(native['logits'])
    our_logits = logits_of(model, loaded.variables, images)
    rows.append({
        'direction': 'in', 'model': name, 'library': native['library'],
        'made_with': native['description'], 'files': native['files'],
        'library_rereads_identically': native['library_rereads_identically'],
        'read_as': (f'{loaded.kind}: {type(model).__name__}(patch '
                    f'{model.patch_size}, hidden {model.hidden_size}, '
                    f'{model.num_layers} layers, {model.num_heads} heads, '
                    f'classifier {model.classifier!r}, {model.num_classes} '
                    f'classes) at {loaded.image_size}'),
        'tanh GELU, eps 1e-6 (as saved)': relative(our_logits, theirs, theirs),
    })
    if 'logits_official_stem' in native:
      official = np.array(native['logits_official_stem'])
      rows[-1][OFFICIAL_STEM] = relative(our_logits, official, official)
    print(f'ours: {name} read', flush=True)

  under_target = all(
      row.get('tanh GELU, eps 1e-6 (as exported)',
              row.get('tanh GELU, eps 1e-6 (as saved)'))['max_rel_diff'] <
      TARGET for row in rows if OFFICIAL_STEM not in row)
  return dict(
      date=datetime.date.today().isoformat(), versions={
          **answer['versions'], 'jax': jax.__version__,
          'flax': flax.__version__, 'numpy': np.__version__,
          'python (ours)': sys.version.split()[0]
      }, pythons=dict(vit_jax=sys.executable, libraries=FLAGS.torch_python),
      jax_backend=jax.default_backend(), torch_threads=answer['torch_threads'],
      images=f'{NUM_IMAGES} x {IMAGE_SIZE}x{IMAGE_SIZE}x3 float32, uniform in '
      '[-1, 1] (numpy default_rng(0)); NCHW for torch',
      metric='max |a - b| / max |reference|, the reference being the logits of '
      "the model whose weights they are (ours out, the library's in)",
      target=TARGET, target_applies_to="the pure ViTs' logits as exported or "
      "saved; timm's hybrid computes its stem with other epsilons (its rows: "
      "timm's stem with the official ones, and float32_rounding, float32 "
      'against float64)', all_under_target=under_target, rows=rows)


def _cell(row: dict, key: str) -> str:
  return f'{row[key]["max_rel_diff"]:.1e}' if key in row else ''


def table(record: dict) -> str:
  rows = []
  for row in record['rows']:
    out = row['direction'] == 'out'
    key = f'tanh GELU, eps 1e-6 (as {"exported" if out else "saved"})'
    rows.append([
        f'vit_jax -> {row["library"]}'
        if out else f'{row["library"]} -> vit_jax', row['model'],
        _cell(row, key), f'{row[key]["top1_agree"]}/{NUM_IMAGES}',
        *(_cell(row, k) for k in ('exact GELU', 'LayerNorm eps 1e-12')),
        _cell(row, OFFICIAL_STEM) +
        (f' (float32 rounding: {row["float32_rounding"]:.1e})'
         if 'float32_rounding' in row else '')
    ])
  return runs.markdown_table([
      'direction', 'model', 'logits, max rel. diff', 'top-1 agree',
      'with exact GELU', 'with LayerNorm eps 1e-12', OFFICIAL_STEM
  ], rows)


if __name__ == '__main__':
  app.run(main)

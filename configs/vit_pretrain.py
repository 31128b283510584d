r"""The paper's pre-training recipes (Dosovitskiy et al. 2021, Table 3).

Adam (beta1 0.9, beta2 0.999) with decoupled weight decay, batch 4096, 10k
linear-warmup steps, global-norm clipping at 1 (Table 3 for ImageNet,
big_vision's vit_i21k.py for ImageNet-21k), 224x224 images, and the head of
Sec. 3.1 at pre-training, a hidden tanh layer as wide as the model
(`representation_size`, 768 for ViT-B; with another model pass its width, e.g.
--config.model_overrides.representation_size=1024 for ViT-L), which
fine-tuning drops:

  dataset        epochs  base lr  decay   weight decay  dropout
  imagenet21k    90      1e-3     linear  0.03          0.1
  imagenet2012   300     3e-3     cosine  0.3           0.1

(ViT-L/{16,32} on ImageNet-21k: 30 or 90 epochs.) Choose the dataset after
':' and the model with --config.model:

  python -m vit_jax.main --config=configs/vit_pretrain.py:imagenet21k \
      --config.model=ViT-B_16 --config.data_dir=$TFDS_DATA_DIR --workdir=...

What it needs: the dataset prepared for tensorflow-datasets beforehand in the
array_record format, which the streaming input reads by index without
TensorFlow (`tfds build imagenet2012 --file_format=array_record`, or
`tfds convert_format` on a tfrecord copy; ImageNet needs a manual download,
`imagenet21k` a locally prepared builder with big_vision's split `full`, of
which it trains on `full[51200:]` and tests on `full[:25600]`), on a filesystem
every host sees; and, at batch 4096, a TPU pod or a multi-node GPU cluster
(see docs/multi_host.md), with enough host cores to decode and
crop 4096 images per step (`input_workers` processes per host). The paper
trained ViT-B/16 on ImageNet-21k for about 90 epochs on TPUv3 cores for days.
The paper reports its Table 2/5 numbers for the chosen model; not run in
this project.
"""

from vit_jax import config_schema

RECIPES = {
    # dataset: (tfds name, train and test split, epochs, base lr, decay,
    # weight decay, dropout)
    'imagenet21k': ('tfds:imagenet21k', 'full[51200:]', 'full[:25600]', 90,
                    1e-3, 'linear', 0.03, 0.1),
    'imagenet2012': ('tfds:imagenet2012', 'train', 'validation', 300, 3e-3,
                     'cosine', 0.3, 0.1),
}


def get_config(dataset: str = 'imagenet21k'):
  if dataset not in RECIPES:
    raise ValueError(f'Unknown dataset {dataset!r} for vit_pretrain.py; use '
                     f'one of {", ".join(RECIPES)}.')
  (name, train_split, test_split, epochs, lr, decay, weight_decay,
   dropout) = RECIPES[dataset]
  config = config_schema.defaults()
  config.model = 'ViT-B_16'
  config.model_overrides.dropout_rate = dropout
  config.model_overrides.representation_size = 768
  config.dtype = 'bfloat16'  # float32 parameters and optimizer state

  config.dataset = name
  config.train_split, config.test_split = train_split, test_split
  config.image_size = 224
  # Each host reads, Inception-crops and resizes its share of every batch.
  config.input_pipeline = 'streaming'
  config.augment = True
  # Inputs in [-1, 1], as the official code.
  config.pixel_mean, config.pixel_std = config_schema.RELEASED_PIXELS

  # The paper states the length in epochs (converted to steps once the
  # dataset's size is known) and the warmup in steps.
  config.num_epochs = epochs
  config.warmup_steps = 10_000
  config.lr_decay = decay
  config.batch_size = 4096
  config.eval_batch_size = 1024
  config.optimizer = 'adamw'
  config.learning_rate = lr
  config.weight_decay = weight_decay
  config.grad_clip_norm = 1.0
  # As big_vision's ViT pre-training: progress every 50 steps, evaluation
  # and a checkpoint every 1000.
  config.log_every_steps = 50
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  return config

"""Checkpoint formats: parameters written by others (and by us for them).

  params.py   what every format shares: key paths, expected shapes, the fit
              check, and fitting a pre-trained tree to a new model
  npz.py      the official google-research/vision_transformer `.npz`

A new format is a module here that reads into our parameter tree (the
official linen model's) and, where it can, writes back.
"""

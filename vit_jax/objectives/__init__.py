"""What a train step minimizes: a base loss (`losses`), and the techniques
that wrap it (`distillation`, `locality_guidance`; an MAE's reconstruction in
`models/masked_autoencoder.py`), each a function from one objective to
another, with a trained run as their teacher (`teacher_run`)."""

"""What a train step minimizes: a base loss, and the techniques that wrap
it, each a function from one objective to another.

  losses.py             soft targets, cross-entropy, label smoothing; the
                        `Objective` a step minimizes
  distillation.py       DeiT's hard distillation from a teacher run
  locality_guidance.py  the ViT's blocks imitating a CNN run's features
  teacher_run.py        a trained run read as a frozen teacher, its inputs
                        checked
"""

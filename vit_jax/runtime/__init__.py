"""What every command runs in: its processes and devices, signals and files.

  command.py       flags parsed; libraries' records kept out of the log
  distributed.py   start-up: CPU devices, joining and leaving a job
  job.py           a command as one process of a job: flags, exit status
  sharding.py      the mesh and where arrays live on it
  stop_signals.py  SIGTERM and Ctrl-C caught from the start
  preemption.py    the loop's view of a stop request, agreed across processes
  workdir_lock.py  one run per workdir
  files.py         files written whole or not at all; image files
"""

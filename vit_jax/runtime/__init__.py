"""What every command runs in: its processes and devices, its signals, its
files.

  command.py       flags parsed (a --config that cannot load is one line);
                   libraries' records kept out of the log
  distributed.py   start-up: the CPU's devices, joining a multi-process job,
                   leaving it
  job.py           a command as one process of a job: its flags, joining,
                   exit status
  sharding.py      the mesh and where arrays live on it
  stop_signals.py  SIGTERM and Ctrl-C caught from the start: a request to
                   stop, or an end at once in one line
  preemption.py    the loop's view of a stop request, agreed across
                   processes
  workdir_lock.py  one run per workdir
  files.py         files and folders written whole or not at all; image
                   files
"""

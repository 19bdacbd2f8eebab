#!/usr/bin/env python3
"""Record the signals this process receives, one name a line, in the file
named by argv[1]; write "ready" there first. SIGUSR1 and SIGUSR2 are only
recorded; SIGTERM is recorded and ends the process with status 143 (as a
training script that saves a checkpoint and exits). With "--exit-on USR2",
SIGUSR2 ends it the same way. A job restarted by Slurm (SLURM_RESTART_COUNT
set) writes "restarted N" and exits 0 at once.
"""
import os
import signal
import sys
import time

path = sys.argv[1]
exit_on = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--exit-on" else ""


def note(text):
    with open(path, "a") as f:
        f.write(text + "\n")


restarts = os.environ.get("SLURM_RESTART_COUNT")
if restarts:
    note(f"restarted {restarts}")
    sys.exit(0)


def on_signal(signum, frame):
    name = signal.Signals(signum).name[3:]
    note(name)
    if name == "TERM" or name == exit_on:
        sys.exit(143)


for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, on_signal)
note("ready")
print("ready", flush=True)
while True:
    time.sleep(3600)

"""Prints a TCP port free on this node for torchrun's c10d rendezvous, below
the kernel's ephemeral range (ip_local_port_range): both attempts of a job
listen on it, and a port the kernel never hands out by itself is not taken
in between by another process's connection or listener."""
import random
import socket

with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    low = int(f.read().split()[0])
for port in random.sample(range(20000, min(low, 32768)), 200):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port below the ephemeral range")

// Package slurm holds gpuguard's tests against a real Slurm cluster and the
// scripts that give a machine one:
//
//	start-local-slurm.sh   a one-node Slurm on localhost (Debian's slurmctld,
//	                       slurmd and munge, no systemd), private config and
//	                       state directory; prints `export SLURM_CONF=...`
//	stop-local-slurm.sh    cancels its jobs and stops exactly the daemons the
//	                       start script started
//	start-multinode-slurm.sh, stop-multinode-slurm.sh
//	                       the same for a Slurm of several nodes on one
//	                       machine: a network namespace, host name and
//	                       slurmd per node (the tests of slurm/multinode)
//	lib/slurm-common.sh    what the four scripts share (sourced by them)
//
// The tests (slurm_test.go) submit real jobs that run gpuguard: an OOM in a
// job step recovered by relaunching the step, a rank's OOM in a two-rank
// step, a host OOM under the cgroup memory limit, signals from scancel, a
// requeue that continues with the reduced settings and the latest checkpoint,
// and a time limit's warning signal; internal/slurmtest is the harness
// they share with slurm/multinode. Run as root, they start a private
// cluster of their own (installing the packages with apt when they are
// missing) and stop it at the end; see docs/slurm.md. The package has no Go
// code of its own.
package slurm

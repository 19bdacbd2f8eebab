// Package multinode holds gpuguard's tests against a real Slurm cluster of
// several nodes on one machine, started by ../start-multinode-slurm.sh (each
// node a network namespace with its own address, host name and slurmd; one
// slurmctld on the host; the file system shared as a cluster file system
// is) and stopped by ../stop-multinode-slurm.sh.
//
// harness_test.go starts the cluster and gives the tests the helpers of its
// nodes (running a command on a node, cutting a node's link, the processes
// of a node or a job); submitting jobs, waiting for them and reading a run
// directory's events come from ../internal/slurmtest, which ../ shares;
// srun_test.go
// holds the tests of one gpuguard around `srun -N2` (TestMultiNode*), and
// bench_test.go the benchmark of a relaunch across nodes. Run as root; see
// docs/slurm.md ("A multi-node Slurm on this machine"). The package has no Go
// code of its own.
package multinode

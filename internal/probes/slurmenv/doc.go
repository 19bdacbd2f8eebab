// Package slurmenv reads the Slurm context of a job from its environment
// (SLURM_JOB_ID, the restart count, the time limit, the task's rank: the
// only reader of SLURM_* variables), and the run id by which a requeued job
// finds its run directory again.
package slurmenv

package slurmenv

import (
	"strings"
	"testing"
	"time"
)

func TestSlurmFromEnv(t *testing.T) {
	env := []string{
		"HOME=/root", "SLURM_JOB_ID=4242", "SLURM_JOB_NAME=train", "SLURM_STEP_ID=0", "SLURM_PROCID=3", "SLURM_LOCALID=1",
		"SLURM_JOB_NODELIST=gpu[01-02]", "SLURM_ARRAY_JOB_ID=4240", "SLURM_ARRAY_TASK_ID=2", "SLURM_STEP_GPUS=0,1",
		"SLURM_RESTART_COUNT=2", "SLURMD_NODENAME=gpu02", "SLURM_JOB_NUM_NODES=2",
	}
	s := FromEnv(env)
	if !s.InSlurm() || s.JobID != "4242" || s.StepID != "0" || *s.ProcID != 3 || *s.LocalID != 1 || s.Restarts() != 2 ||
		s.NodeList != "gpu[01-02]" || s.ArrayJobID != "4240" || s.ArrayTaskID != "2" || s.GPUs != "0,1" ||
		s.Node != "gpu02" || s.NNodes != 2 || s.RequeueID() != "4240_2" {
		t.Errorf("%+v", s)
	}
	want := "job 4242 step 0, name train, array 4240_2, rank 3, restart 2, nodes gpu[01-02], gpus 0,1"
	if s.String() != want {
		t.Errorf("String() = %q, want %q", s.String(), want)
	}

	// First run of a batch script: no restart count, no step, old names.
	s = FromEnv([]string{"SLURM_JOBID=7", "SLURM_NODELIST=n1", "SLURM_PROCID=x"})
	if s.JobID != "7" || s.NodeList != "n1" || s.Node != "" || s.NNodes != 0 || s.RequeueID() != "7" || s.RestartCount != nil || s.Restarts() != 0 || s.ProcID != nil || s.StepID != "" {
		t.Errorf("%+v", s)
	}
	if s.String() != "job 7, restart 0, nodes n1" {
		t.Errorf("%q", s.String())
	}

	// Later entries win; outside Slurm everything is empty.
	if s := FromEnv([]string{"SLURM_JOB_ID=1", "SLURM_JOB_ID=2"}); s.JobID != "2" {
		t.Errorf("%+v", s)
	}
	if s := FromEnv([]string{"PATH=/bin", "SLURM_JOB_IDX=9"}); s.InSlurm() || s.String() != "" {
		t.Errorf("%+v", s)
	}
}

// Newer Slurm releases give the job's start and end (its time limit) in the
// environment; older ones do not, and a malformed value is no value.
func TestSlurmTimeLimit(t *testing.T) {
	s := FromEnv([]string{"SLURM_JOB_ID=7", "SLURM_JOB_START_TIME=1790000000", "SLURM_JOB_END_TIME=1790007200"})
	if s.TimeLimit() != 2*time.Hour {
		t.Errorf("time limit %v, want 2h", s.TimeLimit())
	}
	if got := s.String(); !strings.HasSuffix(got, "ends 2026-09-21 16:13:20 UTC (time limit 2h0m0s)") {
		t.Errorf("String() = %q", got)
	}
	for _, env := range [][]string{
		{"SLURM_JOB_ID=7"},
		{"SLURM_JOB_ID=7", "SLURM_JOB_START_TIME=x", "SLURM_JOB_END_TIME=1790007200"},
	} {
		if s := FromEnv(env); s.TimeLimit() != 0 || s.StartTime != nil {
			t.Errorf("%q: time limit %v, start %v", env, s.TimeLimit(), s.StartTime)
		}
	}
}

func TestRunID(t *testing.T) {
	cases := []struct {
		env  []string
		want string
	}{
		{[]string{"PATH=/bin"}, ""},
		{[]string{"SLURM_JOB_ID=42"}, "42"},
		{[]string{"SLURM_JOBID=42"}, "42"},
		{[]string{"SLURM_JOB_ID=42", "SLURM_ARRAY_JOB_ID=40", "SLURM_ARRAY_TASK_ID=2"}, "40_2"},
		// Several tasks of a step each run gpuguard: one run per task.
		{[]string{"SLURM_JOB_ID=42", "SLURM_NTASKS=4", "SLURM_STEP_ID=0", "SLURM_PROCID=3"}, "42-task3"},
		// The batch script itself (no step) is one gpuguard for all tasks.
		{[]string{"SLURM_JOB_ID=42", "SLURM_NTASKS=4", "SLURM_PROCID=0"}, "42"},
		{[]string{"SLURM_JOB_ID=42", "SLURM_NTASKS=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0"}, "42"},
	}
	for _, c := range cases {
		if got := FromEnv(c.env).RunID(); got != c.want {
			t.Errorf("RunID(%q) = %q, want %q", c.env, got, c.want)
		}
	}
}

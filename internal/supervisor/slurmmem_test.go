package supervisor

import (
	"testing"
)

// memPolicy raises the Slurm memory request after a CPU allocator OOM.
const memPolicy = `version: 1
rules:
  - name: host
    when: {kind: [cpu_alloc_oom, host_oom]}
    steps:
      - raise_slurm_mem: {by: 1.5, max: 8G}
backoff: {initial: 0s, max: 0s, jitter: 0}
`

// cpuOOM is a job that dies of a CPU allocator OOM.
var cpuOOM = []string{"/bin/sh", "-c", `echo "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes."; exit 1`}

// raise_slurm_mem requeues the job, then raises its request in the form it
// used (per node, per CPU); when Slurm refuses the requeue nothing changes,
// and the rule, with no step left, gives up saying what Slurm said.
func TestRaiseSlurmMem(t *testing.T) {
	for _, tc := range []struct {
		name, scontrol string
		env            []string
		calls          string
		result         string
		stderr         []string
	}{
		{"per node", "", []string{"SLURM_JOB_ID=42", "SLURM_MEM_PER_NODE=4096"},
			"requeue 42|update JobId=42 MinMemoryNode=6144", "requeued with more memory",
			[]string{"Slurm job 42, restart 0; no requeue on signals (the policy has no slurm: section); raise_slurm_mem requeues the job with more memory",
				"rule host step 1: mem 4G→6G; requeueing the Slurm job with it",
				"requeued Slurm job 42 with mem 4G→6G (scontrol update JobId=42 MinMemoryNode=6144): it continues from .gpuguard/runs/slurm-42"}},
		{"per CPU", "", []string{"SLURM_JOB_ID=42", "SLURM_MEM_PER_CPU=2048"},
			"requeue 42|update JobId=42 MinMemoryCPU=3072", "requeued with more memory",
			[]string{"mem-per-cpu 2G→3G"}},
		{"requeue refused", "disabled", []string{"SLURM_JOB_ID=42", "SLURM_MEM_PER_NODE=4096"},
			"requeue 42", "refused",
			[]string{"rule host step 1 (mem 4G→6G) cannot act: scontrol requeue 42: Requested operation is presently disabled for job 42",
				"giving up: attempt 1: cpu_alloc_oom in an unknown phase: every matching rule is at its floors (rule host step 1: Slurm refused to raise the memory request: scontrol requeue 42: Requested operation is presently disabled for job 42)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startInSlurm(t, memPolicy, tc.scontrol, tc.env, cpuOOM...)
			c.wantJobEnd(t, tc.calls, tc.stderr...)
			req := c.events(t, "slurm-42", "requeue")
			if len(req) != 1 || req[0]["result"] != tc.result {
				t.Errorf("requeue events %v, want one %q", req, tc.result)
			}
			if tc.result != "refused" {
				st := c.state(t, "slurm-42")
				if st.Policies.Rules["host"].Fired != 1 {
					t.Errorf("state.json does not hold the decision's state: %+v", st.Policies)
				}
			}
		})
	}
}

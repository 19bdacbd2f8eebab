package slurmenv

import (
	"strconv"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/envlist"
)

// Context is the Slurm job context of a process, read from the
// environment Slurm gives job steps. Fields are empty (or nil) when the
// variable is absent.
type Context struct {
	JobID    string `json:"job_id"`             // SLURM_JOB_ID (SLURM_JOBID on old versions)
	JobName  string `json:"job_name,omitempty"` // SLURM_JOB_NAME
	StepID   string `json:"step_id,omitempty"`  // SLURM_STEP_ID (SLURM_STEPID): absent in the batch script itself
	NodeList string `json:"node_list,omitempty"`
	// Node is SLURMD_NODENAME: the node this process runs on, as Slurm
	// names it (what ExcNodeList takes).
	Node string `json:"node,omitempty"`
	// NNodes is SLURM_JOB_NUM_NODES (SLURM_NNODES): the nodes of the job's
	// allocation; 0 when unset.
	NNodes int `json:"nnodes,omitempty"`
	// NTasks is SLURM_NTASKS (SLURM_NPROCS on old versions): the tasks of
	// the step, or of the job in its batch script; 0 when unset.
	NTasks int `json:"ntasks,omitempty"`
	// ProcID is SLURM_PROCID, the task's global rank in the step.
	ProcID *int `json:"proc_id,omitempty"`
	// LocalID is SLURM_LOCALID, the task's rank on its node.
	LocalID *int `json:"local_id,omitempty"`
	// RestartCount is SLURM_RESTART_COUNT: how many times the job was
	// requeued. Slurm sets it only after a requeue, so it is nil in a job's
	// first run (read that as 0).
	RestartCount *int `json:"restart_count,omitempty"`
	// ArrayJobID and ArrayTaskID are set for array jobs.
	ArrayJobID  string `json:"array_job_id,omitempty"`
	ArrayTaskID string `json:"array_task_id,omitempty"`
	// GPUs is what Slurm says it allocated (SLURM_STEP_GPUS, else
	// SLURM_JOB_GPUS), as Slurm wrote it.
	GPUs string `json:"gpus,omitempty"`
	// StartTime and EndTime are SLURM_JOB_START_TIME and SLURM_JOB_END_TIME,
	// Unix seconds: when the job started and when its time limit ends it.
	// Newer Slurm releases set them; older ones (22.05 among them) do not,
	// and then they are nil.
	StartTime *int64 `json:"start_time,omitempty"`
	EndTime   *int64 `json:"end_time,omitempty"`
	// MemPerNode and MemPerCPU are SLURM_MEM_PER_NODE and SLURM_MEM_PER_CPU:
	// the job's memory request in MiB (sbatch --mem or --mem-per-cpu; one
	// of them, or neither when the job asked for none and the cluster gives
	// no default).
	MemPerNode *int64 `json:"mem_per_node,omitempty"`
	MemPerCPU  *int64 `json:"mem_per_cpu,omitempty"`
}

// TimeLimit is EndTime − StartTime, or 0 when either is unknown.
func (s Context) TimeLimit() time.Duration {
	if s.StartTime == nil || s.EndTime == nil || *s.EndTime < *s.StartTime {
		return 0
	}
	return time.Duration(*s.EndTime-*s.StartTime) * time.Second
}

// InSlurm says whether the environment is a Slurm job's.
func (s Context) InSlurm() bool { return s.JobID != "" }

// Restarts is RestartCount with the first run counted as 0.
func (s Context) Restarts() int {
	if s.RestartCount == nil {
		return 0
	}
	return *s.RestartCount
}

// String is a one-line description ("job 42 step 0, array 40_2, rank 3,
// restart 1, nodes gpu[01-02]"), or "" outside Slurm.
func (s Context) String() string {
	if !s.InSlurm() {
		return ""
	}
	var parts []string
	job := "job " + s.JobID
	if s.StepID != "" {
		job += " step " + s.StepID
	}
	parts = append(parts, job)
	if s.JobName != "" {
		parts = append(parts, "name "+s.JobName)
	}
	if s.ArrayJobID != "" {
		parts = append(parts, "array "+s.ArrayJobID+"_"+s.ArrayTaskID)
	}
	if s.ProcID != nil {
		parts = append(parts, "rank "+strconv.Itoa(*s.ProcID))
	}
	parts = append(parts, "restart "+strconv.Itoa(s.Restarts()))
	if s.NodeList != "" {
		parts = append(parts, "nodes "+s.NodeList)
	}
	if s.GPUs != "" {
		parts = append(parts, "gpus "+s.GPUs)
	}
	if s.EndTime != nil {
		end := "ends " + time.Unix(*s.EndTime, 0).UTC().Format("2006-01-02 15:04:05 UTC")
		if l := s.TimeLimit(); l > 0 {
			end += " (time limit " + l.String() + ")"
		}
		parts = append(parts, end)
	}
	return strings.Join(parts, ", ")
}

// FromEnv reads the Slurm context from env (os.Environ() form, later
// entries win). It is pure: no file or process is consulted. Numbers that do
// not parse are left nil.
func FromEnv(env []string) Context {
	get := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := envlist.Lookup(env, k); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	num64 := func(key string) *int64 {
		n, err := strconv.ParseInt(get(key), 10, 64)
		if err != nil {
			return nil
		}
		return &n
	}
	num := func(keys ...string) *int {
		v := get(keys...)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil
		}
		return &n
	}
	return Context{
		JobID:        get("SLURM_JOB_ID", "SLURM_JOBID"),
		JobName:      get("SLURM_JOB_NAME"),
		StepID:       get("SLURM_STEP_ID", "SLURM_STEPID"),
		NodeList:     get("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
		Node:         get("SLURMD_NODENAME"),
		NNodes:       derefOr(num("SLURM_JOB_NUM_NODES", "SLURM_NNODES"), 0),
		ProcID:       num("SLURM_PROCID"),
		NTasks:       derefOr(num("SLURM_NTASKS", "SLURM_NPROCS"), 0),
		LocalID:      num("SLURM_LOCALID"),
		RestartCount: num("SLURM_RESTART_COUNT"),
		ArrayJobID:   get("SLURM_ARRAY_JOB_ID"),
		ArrayTaskID:  get("SLURM_ARRAY_TASK_ID"),
		GPUs:         get("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"),
		StartTime:    num64("SLURM_JOB_START_TIME"),
		EndTime:      num64("SLURM_JOB_END_TIME"),
		MemPerNode:   num64("SLURM_MEM_PER_NODE"),
		MemPerCPU:    num64("SLURM_MEM_PER_CPU"),
	}
}

func derefOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// RunID keys a run directory by Slurm job, and array task, and task rank
// when several tasks of a step run gpuguard (srun -n4 gpuguard run ...), so
// that a requeued job finds its run again. It is "" outside Slurm.
func (s Context) RunID() string {
	if s.JobID == "" {
		return ""
	}
	id := s.JobID
	if s.ArrayTaskID != "" {
		id = s.ArrayJobID + "_" + s.ArrayTaskID
	}
	if s.NTasks > 1 && s.StepID != "" && s.ProcID != nil {
		id += "-task" + strconv.Itoa(*s.ProcID)
	}
	return id
}

// RequeueID is what `scontrol requeue` and `scontrol update JobId=` take:
// the job id, or ARRAYJOB_TASK for an array task; "" outside Slurm.
func (s Context) RequeueID() string {
	if s.ArrayJobID != "" && s.ArrayTaskID != "" {
		return s.ArrayJobID + "_" + s.ArrayTaskID
	}
	return s.JobID
}

package record

// Restarts is what state.json keeps of the run's restarts from outside
// gpuguard (a Slurm requeue, a preemption, --resume-run), so that the next
// run of the job (the requeued one, a resumed one) continues the tallies
// rather than starting them afresh.
type Restarts struct {
	// Preempted counts the runs that ended on a signal from outside (a
	// preemption, `scontrol requeue`, scancel, the end of the allocation):
	// they are not failures and count against no budget.
	Preempted int `json:"preempted,omitempty"`
	// ExcludedNodes are the nodes the job was requeued without after a
	// failure that pointed at the machine (slurm.exclude_failed_nodes),
	// first left out first.
	ExcludedNodes []string `json:"excluded_nodes,omitempty"`
	// GaveUp counts the runs that gave up saying a retry may help (exit 75
	// with --exit-codes scheduler) while the budgets carried on: a run
	// that continues after one and gives up again says a retry cannot help.
	GaveUp int `json:"gave_up,omitempty"`
}

package rundir

import (
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// The schema of state.json is record.RunState, and its attempts
// record.AttemptState; the supervisor names RunState[policy.State].
type AttemptState = record.AttemptState

// Knobs returns knob values (policy.Values) as the journal records them
// (the Policy and Decision events). It takes any map of values with the
// fields of record.Value, so that this package does not import the policy.
func Knobs[M ~map[string]V, V ~struct {
	Text string
	Null bool
}](vs M) map[string]record.Value {
	if vs == nil {
		return nil
	}
	out := make(map[string]record.Value, len(vs))
	for k, v := range vs {
		out[k] = record.Value(v)
	}
	return out
}

package supervisor

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// describeFailure says how attempt n ended, e.g. "attempt 2 died of GPU OOM
// in validation (asked 15.82 GiB, 6.17 free of 47.40)".
func describeFailure(n int, v classify.Verdict) string {
	what := v.Kind.Noun()
	switch {
	case v.Kind == classify.KindCrash && v.Reason != "":
		what += " (" + v.Reason + ")"
	case v.Kind == classify.KindHang:
		what = "a hang (no progress within its rhythm: stopped" + hangDetail(v) + ")"
	}
	s := fmt.Sprintf("attempt %d died of %s", n, what)
	if v.Phase == classify.PhaseVal || v.Phase == classify.PhaseTrain {
		s += " in " + v.Phase.Words()
	}
	if v.Rank != nil {
		s += fmt.Sprintf(" on rank %d", *v.Rank)
	}
	if o := v.OOM; o != nil && o.RequestedBytes != nil {
		s += " (asked " + humanize.Size(*o.RequestedBytes)
		if o.FreeBytes != nil && o.TotalBytes != nil {
			s += ", " + humanize.Size(*o.FreeBytes) + " free of " + humanize.Size(*o.TotalBytes)
		}
		if v.Fragmentation && o.ReservedUnallocatedBytes != nil {
			s += ", " + humanize.Size(*o.ReservedUnallocatedBytes) + " reserved but unallocated"
		}
		s += ")"
	}
	return s
}

func isMemory(k classify.Kind) bool {
	return k == classify.KindGPUOOM || k == classify.KindCPUAllocOOM || k == classify.KindHostOOM
}

func decisionLabel(d policy.Decision) string {
	if d.FromScratch {
		return "again without the checkpoint"
	}
	switch d.Verb {
	case policy.Relaunch:
		s := fmt.Sprintf("%s step %d", d.Rule, d.Step)
		if len(d.Changes) > 0 {
			parts := make([]string, len(d.Changes))
			for i, c := range d.Changes {
				parts[i] = c.String()
			}
			s += ": " + strings.Join(parts, ", ")
		}
		return s
	case policy.GiveUp:
		return "gave up: " + d.Reason
	}
	return string(d.Verb)
}

func endedLabel(r attemptRow) string {
	if r.code == 0 {
		return "ok"
	}
	if strings.HasPrefix(r.decision, "prevent:") { // prevent.go
		return fmt.Sprintf("stopped before OOM (exit %d)", r.code)
	}
	if r.stoppedBy != 0 && !isMemory(r.verdict.Kind) {
		// The job died because it was told to stop, whatever its last
		// words (a KeyboardInterrupt traceback reads as a crash).
		if r.stoppedBy == syscall.SIGINT {
			return fmt.Sprintf("interrupted (exit %d)", r.code)
		}
		return fmt.Sprintf("stopped by %s (exit %d)", signalName(r.stoppedBy), r.code)
	}
	kind := string(r.verdict.Kind)
	if r.verdict.Kind == classify.KindNone || kind == "" {
		kind = "failed"
	}
	return fmt.Sprintf("%s (exit %d)", kind, r.code)
}

func describeValues(vals policy.Values) string {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + vals[k].String()
	}
	return strings.Join(parts, " ")
}

// envDiff lists the variables that differ between two environments.
func envDiff(before, after []string) []string {
	old := map[string]string{}
	for _, kv := range before {
		if k, v, ok := strings.Cut(kv, "="); ok {
			old[k] = v
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range after {
		k, v, _ := strings.Cut(kv, "=")
		seen[k] = true
		if ov, ok := old[k]; !ok {
			out = append(out, fmt.Sprintf("%s=%s (added)", k, v))
		} else if ov != v {
			out = append(out, fmt.Sprintf("%s=%s (was %s)", k, v, ov))
		}
	}
	for k := range old {
		if !seen[k] {
			out = append(out, k+" (removed)")
		}
	}
	sort.Strings(out)
	return out
}

// allocConf is the allocator configuration the job runs with.
func allocConf(env []string) string {
	if v := envlist.Get(env, "PYTORCH_CUDA_ALLOC_CONF"); v != "" {
		return v
	}
	return envlist.Get(env, "PYTORCH_ALLOC_CONF")
}

func printErrors(status *Status, err error) {
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range m.Unwrap() {
			status.Printf("%v", e)
		}
		return
	}
	status.Printf("%v", err)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func orNone(s string) string {
	if s == "" {
		return "not set"
	}
	return s
}

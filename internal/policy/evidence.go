package policy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// HostMemory is what the supervisor measured of the job's host memory: the
// ceiling that applies to it and, from the memory sampler, the phases'
// peaks and what held the memory when the job died. Outcome.Host; nil when
// nothing was measured.
type HostMemory struct {
	// Ceiling is the host memory ceiling that applies to the job, in
	// bytes (0: unknown), and CeilingFrom names it: "RLIMIT_DATA" or
	// "RLIMIT_AS" (a per-process limit: an allocation past it fails, a
	// cpu_alloc_oom), "the memory cgroup's limit" or "Slurm's --mem" (the
	// kernel kills, a host_oom).
	Ceiling     int64  `json:"ceiling,omitempty"`
	CeilingFrom string `json:"ceiling_from,omitempty"`
	// Starts and Peaks are, per phase, the job's use of that ceiling at the
	// phase's first reading (its fixed part: the model, the data, the
	// interpreter) and its highest reading, in bytes; counted as the
	// ceiling counts (the main process's data segment under RLIMIT_DATA,
	// its address space under RLIMIT_AS, the processes' memory under a
	// cgroup). A missing phase or 0 means unknown. fit reads them.
	Starts map[classify.Phase]int64 `json:"starts,omitempty"`
	Peaks  map[classify.Phase]int64 `json:"peaks,omitempty"`
	// Last is the use of the ceiling at the last reading before the
	// failure (0: unknown).
	Last int64 `json:"last,omitempty"`
	// What held the host memory at the memory sampler's last sample before
	// the job died, by role: the main process (and the ranks a launcher
	// started), its DataLoader workers, and other processes under the same
	// limit; Limit is the limit they were measured against (the cgroup's,
	// or the machine's RAM). All 0: not measured.
	Main, Workers, Other, Limit int64
}

// Roles of what held the host memory (HostMemory: Main, Workers, Other).
const (
	heldMain    = "the main process"
	heldWorkers = "workers"
	heldOther   = "other processes"
)

// holder is the role that held most of the host memory when the job died,
// and the evidence in words ("workers held 1.43 of 1.42 GiB"); "" when the
// sampler measured nothing or no role holds a clear majority of what was
// measured.
func (h *HostMemory) holder() (role, evidence string) {
	if h == nil {
		return "", ""
	}
	total := h.Main + h.Workers + h.Other
	if total <= 0 {
		return "", ""
	}
	role, held := heldMain, h.Main
	if h.Workers > held {
		role, held = heldWorkers, h.Workers
	}
	if h.Other > held {
		role, held = heldOther, h.Other
	}
	// A clear majority: more than half of what the job's side held.
	if 2*held <= total {
		return "", ""
	}
	limit := h.Limit
	if limit <= 0 {
		limit = total
	}
	return role, fmt.Sprintf("%s held %s", role, sizeOf(held, limit))
}

// sizeOf is "1.43 of 1.42 GiB": part in whole's unit.
func sizeOf(part, whole int64) string {
	w := humanize.Size(whole)
	num, unit, ok := strings.Cut(w, " ")
	if !ok {
		return humanize.Size(part) + " of " + w
	}
	var div float64
	switch unit {
	case "GiB":
		div = 1 << 30
	case "MiB":
		div = 1 << 20
	case "KiB":
		div = 1 << 10
	default:
		return humanize.Size(part) + " of " + w
	}
	prec := 2
	if d := strings.IndexByte(num, '.'); d >= 0 {
		prec = len(num) - d - 1
	} else {
		prec = 0
	}
	return strconv.FormatFloat(float64(part)/div, 'f', prec, 64) + " of " + w
}

// hostEvidence is how the sampler's evidence steers the rules after a
// host out-of-memory failure: the role that held the memory and the words
// for the decision line. ok is false when there is no evidence to use (not
// a host OOM, a compiler's or /dev/shm's, or no clear holder).
type hostEvidence struct {
	role, words string
}

func evidenceOf(kind classify.Kind, out Outcome) (hostEvidence, bool) {
	v := out.Verdict
	if kind != classify.KindHostOOM || v.Build || v.SharedMemory {
		return hostEvidence{}, false
	}
	role, words := out.Host.holder()
	if role == "" {
		return hostEvidence{}, false
	}
	return hostEvidence{role: role, words: words}, true
}

// fits reports whether rule r agrees with the evidence: a rule that cuts
// workers, or says worker: true, when the workers held the memory; a rule
// that changes something else, or says worker: false, when the main
// process did. A rule that names none of these agrees with nothing in
// particular, and is tried only when no rule agrees.
func (e hostEvidence) fits(r *rule) bool {
	cuts := false
	for _, s := range r.steps {
		for _, a := range s.actions {
			if a.verb() == "cut_workers" {
				cuts = true
			}
		}
	}
	switch e.role {
	case heldWorkers:
		if r.when.worker != nil {
			return *r.when.worker
		}
		return cuts
	case heldMain:
		if r.when.worker != nil {
			return !*r.when.worker
		}
		return !cuts
	}
	return false
}

// whenWords names a rule with what its when: says of the phase and kind:
// "rule val-oom (when: phase val)".
func (r *rule) whenWords() string {
	var parts []string
	if r.when.phases != nil {
		ph := make([]string, len(r.when.phases))
		for i, p := range r.when.phases {
			ph[i] = string(p)
			if p == classify.PhaseNone {
				ph[i] = "unknown"
			}
		}
		parts = append(parts, "phase "+strings.Join(ph, ", "))
	}
	if r.when.kinds != nil {
		parts = append(parts, "kind "+kindList(r.when.kinds))
	}
	if len(parts) == 0 {
		return "rule " + r.name
	}
	return fmt.Sprintf("rule %s (when: %s)", r.name, strings.Join(parts, ", "))
}

// evidenceNote is what the decision says of the evidence: what held the
// memory, and, when a rule that the failure's label matched first was
// passed over for fired, that the evidence won: "workers held 1.43 of 1.42
// GiB: the evidence wins over rule val-oom (when: phase val)".
func (p *Policy) evidenceNote(ev hostEvidence, fired *rule, kind classify.Kind, out Outcome) string {
	var over []string
	for _, r := range p.rules {
		if r == fired {
			break
		}
		if !ev.fits(r) && r.when.matches(kind, out) {
			over = append(over, r.whenWords())
		}
	}
	if len(over) == 0 || !ev.fits(fired) {
		return ev.words
	}
	return ev.words + ": the evidence wins over " + strings.Join(over, ", ")
}

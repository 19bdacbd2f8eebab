package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SlurmMem is a Slurm job's memory request as the supervisor read it from
// Slurm (SLURM_MEM_PER_NODE or SLURM_MEM_PER_CPU, scontrol show job's
// MinMemoryNode or MinMemoryCPU). Outcome carries it; raise_slurm_mem reads
// it.
type SlurmMem struct {
	MiB    int64 // the request, in MiB: Slurm's unit ("M")
	PerCPU bool  // --mem-per-cpu (MinMemoryCPU) rather than --mem (MinMemoryNode)
	// Refused is what Slurm said when the supervisor last tried to raise the
	// request and requeue the job, and could not. raise_slurm_mem cannot act
	// then, and the rule goes on.
	Refused string
}

// Field is the `scontrol update` field that holds the request.
func (m SlurmMem) Field() string {
	if m.PerCPU {
		return "MinMemoryCPU"
	}
	return "MinMemoryNode"
}

// Option is the sbatch option that holds the request, for people.
func (m SlurmMem) Option() string {
	if m.PerCPU {
		return "mem-per-cpu"
	}
	return "mem"
}

// raiseSlurmMemAction is `raise_slurm_mem: {by: 1.5, max: 64G}`: it raises
// the Slurm job's memory request by a factor, up to max, in the form the
// job used (per node or per CPU). The supervisor acts on it: a new request
// takes effect only in a new allocation, so the job is requeued with it
// instead of being relaunched here. It cannot act outside Slurm, for a job
// without a memory request, at max, or when Slurm refused.
type raiseSlurmMemAction struct {
	by     float64
	maxMiB int64
}

func parseRaiseSlurmMem(w *walker, in actionInput) action {
	what := in.what + ": raise_slurm_mem"
	a := &raiseSlurmMemAction{by: 1.5}
	haveMax := false
	for _, f := range w.mapping(in.verb.val, what, "by", "max") {
		switch f.name {
		case "by":
			a.by = w.float(f.val, what+": by")
			if a.by <= 1 {
				w.at(f.val, "%s: by must be a factor above 1 (1.5 asks for half as much again)", what)
			}
		case "max":
			haveMax = true
			s, ok := w.scalar(f.val, what+": max")
			if !ok {
				continue
			}
			mib, err := ParseSlurmSize(s)
			if err != nil {
				w.at(f.val, "%s: max: %v", what, err)
				continue
			}
			a.maxMiB = mib
		}
	}
	if !haveMax {
		w.at(in.verb.key, "%s needs max: (the largest request, e.g. 64G; per CPU for a job submitted with --mem-per-cpu)", what)
	}
	return a
}

func (a *raiseSlurmMemAction) verb() string           { return "raise_slurm_mem" }
func (a *raiseSlurmMemAction) numericKnobs() []string { return nil }
func (a *raiseSlurmMemAction) envVars() []string      { return nil }

// apply computes the new request: the current one times by, rounded up to a
// whole MiB, at most max. It changes no knob: its Change names the Slurm
// option (mem, mem-per-cpu) and carries the new request, which the
// supervisor asks Slurm for.
func (a *raiseSlurmMemAction) apply(_ *Policy, _ Values, out *Outcome) ([]Change, string) {
	switch {
	case out == nil:
		return nil, "the Slurm memory request is known only when the job runs under Slurm"
	case out.SlurmMem == nil || out.SlurmMem.MiB <= 0:
		return nil, "not a Slurm job with a memory request (sbatch --mem or --mem-per-cpu)"
	case out.SlurmMem.Refused != "":
		return nil, "Slurm refused to raise the memory request: " + out.SlurmMem.Refused
	}
	m := *out.SlurmMem
	if m.MiB >= a.maxMiB {
		return nil, fmt.Sprintf("%s is %s, at its ceiling (max %s)", m.Option(), SlurmSize(m.MiB), SlurmSize(a.maxMiB))
	}
	next := min(int64(math.Ceil(float64(m.MiB)*a.by)), a.maxMiB)
	if next <= m.MiB {
		next = m.MiB + 1
	}
	return []Change{{Slurm: m.Option(), SlurmField: m.Field(), Old: SlurmSize(m.MiB), New: SlurmSize(next), MiB: next}}, ""
}

// SlurmMemChange is the change of a relaunch decision that raises the Slurm
// memory request, if it has one: the supervisor requeues the job with it.
func (d Decision) SlurmMemChange() (Change, bool) {
	for _, c := range d.Changes {
		if c.Slurm != "" {
			return c, true
		}
	}
	return Change{}, false
}

// ParseSlurmSize reads a memory size as Slurm writes it: a number of MiB,
// or with a unit K, M, G or T (binary, as Slurm's), e.g. 4G, 4000M, 4000.
func ParseSlurmSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	if t != "" {
		switch strings.ToUpper(t[len(t)-1:]) {
		case "K":
			mult, t = 1.0/1024, t[:len(t)-1]
		case "M":
			t = t[:len(t)-1]
		case "G":
			mult, t = 1024, t[:len(t)-1]
		case "T":
			mult, t = 1024*1024, t[:len(t)-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a memory size (a number of MiB, or with K, M, G or T: 64G)", s)
	}
	return int64(math.Ceil(f * mult)), nil
}

// SlurmSize writes n MiB as Slurm does: 4G for whole GiB, else 4500M.
func SlurmSize(mib int64) string {
	if mib >= 1024 && mib%1024 == 0 {
		return strconv.FormatInt(mib/1024, 10) + "G"
	}
	return strconv.FormatInt(mib, 10) + "M"
}

// RaisesSlurmMem reports whether a rule's step may raise the Slurm memory
// request (raise_slurm_mem): then the supervisor may requeue the job even
// without a slurm: section.
func (p *Policy) RaisesSlurmMem() bool {
	for _, r := range p.rules {
		for _, s := range r.steps {
			for _, a := range s.actions {
				if _, ok := a.(*raiseSlurmMemAction); ok {
					return true
				}
			}
		}
	}
	return false
}

// describeRaises says, for a dry run's preview, what a step's
// raise_slurm_mem does; "" when the step has none.
func describeRaises(s step) string {
	for _, a := range s.actions {
		if r, ok := a.(*raiseSlurmMemAction); ok {
			return fmt.Sprintf("raises the Slurm job's memory request (--mem or --mem-per-cpu, as submitted) ×%g, up to %s, and requeues the job; repeats on later failures until max", r.by, SlurmSize(r.maxMiB))
		}
	}
	return ""
}

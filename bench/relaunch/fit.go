package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// The fit comparison: how many relaunches a training OOM takes to fit, and
// how much of the largest batch that fits each method keeps, under the
// `fit` action and under halving (both through policy.Decide, both
// compensating with gradient accumulation).
//
// A fitShape's training step: the CUDA context and whatever else is not
// the job's tensors (ctx), then the fixed part (weights, gradients,
// optimizer state), then the activations, batch × perSample, allocated in
// allocs equal allocations. The attempt dies at the first allocation that
// does not fit: the OOM message gives that request, the free memory, the
// total, and what PyTorch had allocated, as PyTorch's does; the measured
// peak is what was in use. With allocs 1 the failing request is all the
// activations; with more it is one of several, and the figures show less.

type fitShape struct {
	name                      string
	capacity, ctx, fixed, per float64 // bytes
	batch, allocs             int
}

var fitShapes = []fitShape{
	{"llm-80g/1", 80 * gib, 0.5 * gib, 40 * gib, 1.5 * gib, 64, 1},
	{"llm-80g/4", 80 * gib, 0.5 * gib, 40 * gib, 1.5 * gib, 64, 4},
	{"llm-80g/16", 80 * gib, 0.5 * gib, 40 * gib, 1.5 * gib, 64, 16},
	{"vit-16g/1", 16 * gib, 0.4 * gib, 4 * gib, 0.3 * gib, 64, 1},
	{"vit-16g/8", 16 * gib, 0.4 * gib, 4 * gib, 0.3 * gib, 64, 8},
	{"over-15%/4", 24 * gib, 0.5 * gib, 6 * gib, 0.5 * gib, 40, 4},
	{"over-8x/4", 16 * gib, 0.4 * gib, 4 * gib, 0.1 * gib, 1024, 4},
	{"over-8x/32", 16 * gib, 0.4 * gib, 4 * gib, 0.1 * gib, 1024, 32},
}

// feasible is the largest batch whose step fits in the whole GPU.
func (s fitShape) feasible() int {
	return int(math.Floor((s.capacity - s.ctx - s.fixed) / s.per))
}

// attempt runs one training step at batch and returns its outcome's verdict
// and the peak fraction in use (Kind none when it fits).
func (s fitShape) attempt(batch int) (classify.Verdict, float64) {
	inUse := s.ctx + s.fixed
	chunk := float64(batch) * s.per / float64(s.allocs)
	for range s.allocs {
		if inUse+chunk > s.capacity {
			b := func(x float64) *int64 { v := int64(x); return &v }
			return classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain, OOM: &classify.OOM{
				RequestedBytes: b(chunk), TotalBytes: b(s.capacity), FreeBytes: b(s.capacity - inUse), AllocatedBytes: b(inUse - s.ctx),
			}}, inUse / s.capacity
		}
		inUse += chunk
	}
	return classify.Verdict{Kind: classify.KindNone}, inUse / s.capacity
}

const fitPolicyFmt = `version: 1
knobs:
  batch_size: {yaml: {key: train.batch_size, flag: --config}}
  grad_accum: {yaml: {key: train.grad_accum, flag: --config}}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - %s: batch_size
        compensate: grad_accum
budget: {relaunches: 20}
`

// fitResult is how one method fared on one fitShape.
type fitResult struct {
	relaunches, batch int
	fit               bool
	why               string
	decisions         []string
}

// runFit runs s under the policy whose one step is verb until it fits.
func runFit(verb string, s fitShape) fitResult {
	pol, err := policy.Parse(verb+".yaml", fmt.Appendf(nil, fitPolicyFmt, verb))
	if err != nil {
		panic(err)
	}
	cfg := fmt.Sprintf("train:\n  batch_size: %d\n  grad_accum: 1\n", s.batch)
	job := policy.Job{Argv: []string{"python3", "train.py", "--config", "config.yaml"}, Dir: "/sim"}
	vals, err := pol.Start(job, func(string) ([]byte, error) { return []byte(cfg), nil })
	if err != nil {
		panic(err)
	}
	st := policy.NewState(vals)
	var r fitResult
	for n := 1; ; n++ {
		batch := atoi(st.Values["batch_size"])
		v, peak := s.attempt(batch)
		r.relaunches, r.batch = n-1, batch
		if v.Kind == classify.KindNone {
			r.fit = true
			return r
		}
		d := pol.Decide(st, policy.Outcome{Verdict: v, Exit: classify.Exit{Code: 1}, Attempt: n, Rand: 0.5,
			Peaks: map[classify.Phase]float64{classify.PhaseTrain: peak}})
		if d.Verb != policy.Relaunch {
			r.why = d.Reason
			return r
		}
		r.decisions = append(r.decisions, d.Describe())
		st = d.State
	}
}

// fitTable prints the comparison and returns the sums: relaunches, and the
// mean fraction of the feasible batch reached, per method.
func fitTable(w io.Writer, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shape\tbatch\tfeasible\tmethod\trelaunches\tfits\tends at\treached")
	methods := []string{"fit", "halve"}
	sums := make([]struct {
		relaunches int
		reached    float64
	}, len(methods))
	for _, s := range fitShapes {
		for i, m := range methods {
			r := runFit(m, s)
			fits := "yes"
			if !r.fit {
				fits = "no: " + r.why
			}
			reached := float64(r.batch) / float64(s.feasible())
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%d\t%.0f%%\n", s.name, s.batch, s.feasible(), m, r.relaunches, fits, r.batch, 100*reached)
			sums[i].relaunches += r.relaunches
			sums[i].reached += reached
			if verbose {
				for _, d := range r.decisions {
					fmt.Fprintf(tw, "\t\t\t\t\t%s\t\t\n", d)
				}
			}
		}
	}
	tw.Flush()
	for i, m := range methods {
		fmt.Fprintf(w, "%s: %d relaunches over %d shapes, %.0f%% of the largest feasible batch on average\n",
			m, sums[i].relaunches, len(fitShapes), 100*sums[i].reached/float64(len(fitShapes)))
	}
}

package main

// The prevention benchmark (-prevent): jobs whose memory grows epoch by
// epoch, run to their end without prevention (an OOM death when a peak
// passes the ceiling, a relaunch from the last checkpoint) and with
// prevent: {memory_growth: restart} (at each checkpoint the projection,
// memory.Project, is asked whether the next epoch fits; policy.PreventGrowth
// decides; a stop relaunches a fresh process from that checkpoint). No
// process runs: the per-epoch peaks are a function of the epoch and of how
// many epochs the process has lived, and the projection and the policy are
// pure. The shapes that only look like growth (warm-up, a cache that fills
// and then stays flat, validation every N epochs, noise near the ceiling)
// must see no stop: every stop there is a false stop.

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"text/tabwriter"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
)

const mib = 1 << 20

// growShape is a simulated job: peak(e, k, st) is epoch e's peak, the k-th
// epoch (from 1) of its process, given what prevention changed.
type growShape struct {
	name      string
	device    string // "host" or a GPU
	ceiling   float64
	epochs    int
	ckptEvery int
	cause     string
	peak      func(e, k int, fx fixes) float64
	grows     bool // a real growth (else any stop is a false one)
}

// fixes is what a rule step changed.
type fixes struct {
	expandable bool // the allocator fixed: no fragmentation
	workers    int
}

func noise(seed uint64) func() float64 {
	r := rand.New(rand.NewPCG(seed, 28))
	return func() float64 { return r.Float64()*2 - 1 }
}

var growShapes = func() []growShape {
	n1, n2, n3 := noise(1), noise(2), noise(3)
	return []growShape{
		{"leak-host", "host", 330 * mib, 30, 1, policy.GrowthLeak, func(_, k int, _ fixes) float64 { return 60*mib + 48*mib*float64(k) }, true},
		{"leak-host-noisy", "host", 330 * mib, 30, 1, policy.GrowthLeak, func(_, k int, _ fixes) float64 { return 60*mib + 40*mib*float64(k) + 8*mib*n1() }, true},
		{"leak-gpu", "GPU0", 40 * gib, 40, 1, policy.GrowthLeak, func(_, k int, _ fixes) float64 { return 20.4*gib + 1*gib*float64(k) }, true},
		{"leak-gpu-ckpt2", "GPU0", 40 * gib, 40, 2, policy.GrowthLeak, func(_, k int, _ fixes) float64 { return 20.4*gib + 1*gib*float64(k) }, true},
		{"fragmentation", "GPU0", 80 * gib, 40, 1, policy.GrowthFragmentation, func(_, k int, fx fixes) float64 {
			if fx.expandable {
				return 60 * gib
			}
			return 61*gib + 2.5*gib*float64(k)
		}, true},
		{"workers-growth", "host", 64 * gib, 30, 1, policy.GrowthWorkers, func(_, k int, fx fixes) float64 {
			return 8*gib + float64(fx.workers)*1.5*gib*float64(k)
		}, true},
		{"warm-up", "GPU0", 40 * gib, 30, 1, policy.GrowthLeak, func(_, k int, _ fixes) float64 {
			if k == 1 {
				return 39 * gib
			}
			return 36 * gib
		}, false},
		{"cache-fills", "host", 330 * mib, 30, 1, policy.GrowthLeak, func(_, k int, _ fixes) float64 { return 60*mib + 80*mib*math.Min(float64(k), 3) }, false},
		{"val-every-3", "GPU0", 40 * gib, 30, 1, policy.GrowthLeak, func(e, _ int, _ fixes) float64 {
			if e%3 == 0 {
				return 38 * gib
			}
			return 30 * gib
		}, false},
		{"noisy-flat-95%", "GPU0", 40 * gib, 30, 1, policy.GrowthLeak, func(_, _ int, _ fixes) float64 { return 38*gib + 0.6*gib*n2() }, false},
		{"slow-rise-fits", "host", 330 * mib, 30, 1, policy.GrowthLeak, func(_, k int, _ fixes) float64 { return 60*mib + 4*mib*float64(k) + 2*mib*n3() }, false},
	}
}()

// preventPolicy is the benchmark's policy: prevention, and the rules whose
// when: names a growth's cause.
const preventPolicy = `version: 1
knobs:
  workers: {flag: --workers, default: 4}
rules:
  - name: fragmentation
    when: {kind: gpu_oom, fragmentation: true}
    steps:
      - set_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
  - name: host-workers
    when: {kind: host_oom, worker: true}
    steps:
      - halve: workers
        min: 1
checkpoints:
  globs: [ckpt/*]
  pass: {flag: --resume}
budget: {relaunches: 100}
prevent: {memory_growth: restart, budget: 20}
`

// growResult is one way of running a shape.
type growResult struct {
	deaths, stops int
	lost          float64 // epochs of work lost to OOM deaths
	done          bool
}

// runGrow runs s to its end, with prevention or not.
func runGrow(pol *policy.Policy, s growShape, prevent bool) growResult {
	st := policy.NewState(policy.Values{"workers": {Text: "4"}})
	var r growResult
	epoch, lastCkpt, attempt := 1, 0, 0
	for epoch <= s.epochs && r.deaths+r.stops < 200 {
		attempt++
		fx := fixes{workers: atoi(st.Values["workers"])}
		_, fx.expandable = st.Values[policy.EnvKey("PYTORCH_CUDA_ALLOC_CONF")]
		var runs []memory.RunPeak
		prev := s.peak(epoch, 1, fx) * 0.5 // the process's memory when its first epoch starts
		restarted := false
		for k := 1; epoch <= s.epochs && !restarted; k, epoch = k+1, epoch+1 {
			p := s.peak(epoch, k, fx)
			if p > s.ceiling {
				// Memory rises through the epoch: it dies where it crosses.
				frac := 1.0
				if p > prev {
					frac = math.Min(math.Max((s.ceiling-prev)/(p-prev), 0), 1)
				}
				r.deaths++
				r.lost += float64(epoch-1-lastCkpt) + frac
				epoch = lastCkpt
				// The policy answers the OOM as it would without
				// prevention (a rule for the cause, if any); a job no
				// rule answers is rerun as it was.
				v := classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain, Fragmentation: s.cause == policy.GrowthFragmentation}
				if s.device == "host" {
					v.Kind = classify.KindHostOOM
				}
				if s.cause == policy.GrowthWorkers {
					v.Requester = classify.RequesterDataLoaderWorker
				}
				if d := pol.Decide(st, policy.Outcome{Verdict: v, Exit: classify.Exit{Code: 1}, Attempt: attempt, Rand: 0.5}); d.Verb == policy.Relaunch {
					st = d.State
				}
				break
			}
			prev = p
			runs = append(runs, memory.RunPeak{Label: int64(epoch), Bytes: uint64(p)})
			if epoch%s.ckptEvery != 0 {
				continue
			}
			lastCkpt = epoch
			if !prevent {
				continue
			}
			pr, ok := memory.Project(runs, uint64(s.ceiling))
			if !ok {
				continue
			}
			// Any epoch before the next checkpoint that will not fit.
			label, bytes, wont := pr.Within(int64(s.ckptEvery))
			if !wont {
				continue
			}
			g := policy.Growth{Attempt: attempt, Phase: classify.PhaseTrain, Device: s.device, Ceiling: "the ceiling",
				CeilingBytes: pr.CeilingBytes, From: pr.From, To: pr.To, Runs: pr.Runs, Epochs: true, SlopeBytes: pr.SlopeBytes,
				MarginBytes: pr.MarginBytes, LastBytes: pr.LastBytes, NextLabel: label, NextBytes: bytes,
				NextWontFit: true, Cause: s.cause, Checkpoint: fmt.Sprintf("ckpt/%d", epoch)}
			if d, ok := pol.PreventGrowth(st, g); ok {
				st = d.State
				r.stops++
				restarted = true
			}
		}
		if restarted || epoch > s.epochs {
			continue
		}
		epoch = lastCkpt + 1 // after a death
	}
	r.done = epoch > s.epochs
	return r
}

// preventTable prints, per shape, OOM deaths and the work they lost
// without and with prevention, and the stops prevention made.
func preventTable(w io.Writer) {
	pol, err := policy.Parse("prevent.yaml", []byte(preventPolicy))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaunch:", err)
		os.Exit(2)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shape\tgrows\twithout: OOM deaths\tlost epochs\twith prevent: OOM deaths\tlost epochs\tstops\tfalse stops")
	var falseStops, deaths0, deaths1 int
	var lost0, lost1 float64
	for _, s := range growShapes {
		a, b := runGrow(pol, s, false), runGrow(pol, s, true)
		fs := 0
		if !s.grows {
			fs = b.stops
		}
		falseStops += fs
		deaths0, deaths1, lost0, lost1 = deaths0+a.deaths, deaths1+b.deaths, lost0+a.lost, lost1+b.lost
		fmt.Fprintf(tw, "%s\t%v\t%d\t%.2f\t%d\t%.2f\t%d\t%d\n", s.name, s.grows, a.deaths, a.lost, b.deaths, b.lost, b.stops, fs)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nover %d shapes: without prevention %d OOM deaths, %.2f epochs lost; with it %d OOM deaths, %.2f epochs lost, %d false stops\n",
		len(growShapes), deaths0, lost0, deaths1, lost1, falseStops)
}

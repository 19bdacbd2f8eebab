package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// What the comparison rests on, checked on every shape with the example
// policy: gpuguard's rules make every shape fit and keep the effective
// batch; a validation OOM never touches the training batch; fragmentation
// is fixed without shrinking anything; plain halving also fits but, once it
// has relaunched, never keeps the effective batch.
func TestExamplePolicyOnShapes(t *testing.T) {
	data, err := os.ReadFile("../../examples/gpuguard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("examples/gpuguard.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shapes {
		g, h := gpuguard(pol, s), halving(s)
		if !g.fit || !h.fit {
			t.Errorf("%s: gpuguard fit %v (%s), halving fit %v (%s)", s.name, g.fit, g.why, h.fit, h.why)
			continue
		}
		if g.batch*g.accum != s.batch {
			t.Errorf("%s: gpuguard ends with effective batch %d×%d, want %d", s.name, g.batch, g.accum, s.batch)
		}
		if h.relaunches > 0 && h.batch == s.batch {
			t.Errorf("%s: halving relaunched %d times but kept the batch", s.name, h.relaunches)
		}
		switch s.name {
		case "val-fullres", "val-2048":
			if g.batch != s.batch || g.valCrop == "full" || g.relaunches != 1 {
				t.Errorf("%s: gpuguard %+v: want one relaunch, a validation crop and the batch untouched", s.name, g)
			}
		case "fragmented":
			if g.batch != s.batch || g.relaunches != 1 {
				t.Errorf("%s: gpuguard %+v: want one relaunch (the allocator) and the batch untouched", s.name, g)
			}
		case "fits":
			if g.relaunches != 0 || h.relaunches != 0 {
				t.Errorf("fits: relaunched (gpuguard %d, halving %d)", g.relaunches, h.relaunches)
			}
		}
	}
}

// againstHalving runs fit (with the probe, or not) and plain halving on
// every fitShape and checks what both comparisons ask: both fit; fit never
// needs more relaunches than halving, and fewer over all the shapes; it
// never ends above the largest value that fits. each checks the rest, per
// shape.
func againstHalving(t *testing.T, label string, probe bool, each func(s fitShape, f, h fitResult)) {
	t.Helper()
	var fitSum, halveSum int
	for _, s := range fitShapes {
		f, h := runFit("fit", true, probe, s), runFit("halve", false, false, s)
		if !f.fit || !h.fit {
			t.Errorf("%s: %s %v (%s), halve %v (%s)", s.name, label, f.fit, f.why, h.fit, h.why)
			continue
		}
		fitSum += f.relaunches
		halveSum += h.relaunches
		if f.relaunches > h.relaunches {
			t.Errorf("%s: %s %d relaunches to %d, halving %d to %d", s.name, label, f.relaunches, f.value, h.relaunches, h.value)
		}
		if feas := s.feasible(); f.value > feas {
			t.Errorf("%s: %s ends at %d, above the feasible %d", s.name, label, f.value, feas)
		}
		each(s, f, h)
	}
	if fitSum >= halveSum {
		t.Errorf("%s %d relaunches over the shapes, halving %d: want fewer", label, fitSum, halveSum)
	}
}

// The fit action against halving; where the failing request is the step's
// one large allocation (the logits shapes) fit also ends closer to the
// feasible value than halving in fewer relaunches.
func TestFitAgainstHalving(t *testing.T) {
	againstHalving(t, "fit", false, func(s fitShape, f, h fitResult) {
		if s.lastPerUnit > 0 && (f.relaunches >= h.relaunches || float64(f.value) < 0.85*float64(s.feasible())) {
			t.Errorf("%s: one large allocation: fit %d relaunches to %d, halving %d to %d, feasible %d",
				s.name, f.relaunches, f.value, h.relaunches, h.value, s.feasible())
		}
	})
}

// fit told the failing layer's place, as the torch probe reports it,
// against halving; where the failure is a layer of a forward with grad, the
// decision says which block it used.
func TestFitWithTheProbe(t *testing.T) {
	againstHalving(t, "fit with the probe", true, func(s fitShape, f, _ fitResult) {
		_, _, _, block, _ := s.attempt(s.value)
		inForward := block != nil && !block.Backward && !block.NoGrad
		if inForward && (len(f.decisions) == 0 || !strings.Contains(f.decisions[0], fmt.Sprintf("block %d of %d in forward", block.Index+1, block.Of))) {
			t.Errorf("%s: failed at block %d of %d in forward, and the decision does not say so: %q", s.name, block.Index+1, block.Of, f.decisions)
		}
	})
}

// The simulated job is PyTorch-like where the comparison depends on it: a
// fresh start allocates the optimizer states at its first step (so the
// phase's start does not hold them), a resumed one holds them from the
// start; the failing request is one layer's activations unless the shape
// has a large last allocation.
func TestFitShapesFailLikePyTorch(t *testing.T) {
	fresh, resumed := fitShapes[0], fitShapes[1]
	v, starts, _, _, fits := fresh.attempt(fresh.value)
	if fits || v.OOM == nil || *v.Step != 2 {
		t.Fatalf("%s: want a failure at step 2 (after the optimizer states appear), got %+v", fresh.name, v)
	}
	if got, want := starts[v.Phase]*fresh.capacity, fresh.ctx+fresh.w; got != want {
		t.Errorf("%s: train started with %.0f in use, want the context and weights %.0f", fresh.name, got, want)
	}
	if req, want := *v.OOM.RequestedBytes, int64(float64(fresh.value)*fresh.perUnit/float64(fresh.layers)); req != want {
		t.Errorf("%s: request %d, want one layer's activations (%d)", fresh.name, req, want)
	}
	_, starts, _, _, _ = resumed.attempt(resumed.value)
	if got, want := starts[classify.PhaseTrain]*resumed.capacity, resumed.ctx+resumed.w+resumed.opt; got != want {
		t.Errorf("%s: train started with %.0f in use, want the optimizer states too (%.0f)", resumed.name, got, want)
	}
}

// docs/performance.md quotes the fit table; it is what fitTable prints.
func TestDocsQuoteTheFitTable(t *testing.T) {
	t.Chdir("../..")
	var b strings.Builder
	fitTable(&b, false)
	doc, err := os.ReadFile("docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```\n"+b.String()+"```\n") {
		t.Errorf("docs/performance.md does not quote the table go run ./bench/relaunch -fit prints:\n%s", b.String())
	}
}

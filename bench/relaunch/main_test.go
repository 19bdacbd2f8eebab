package main

import (
	"os"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
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

// The fit action against halving on training OOMs: on every shape it fits,
// with no more relaunches than halving and a batch at least as large, and
// it never chooses a batch above the largest that fits (a relaunch that
// cannot succeed).
func TestFitAgainstHalving(t *testing.T) {
	for _, s := range fitShapes {
		f, h := runFit("fit", s), runFit("halve", s)
		if !f.fit || !h.fit {
			t.Errorf("%s: fit %v (%s), halve %v (%s)", s.name, f.fit, f.why, h.fit, h.why)
			continue
		}
		if f.relaunches > h.relaunches || f.batch < h.batch {
			t.Errorf("%s: fit %d relaunches to %d, halving %d to %d", s.name, f.relaunches, f.batch, h.relaunches, h.batch)
		}
		if f.batch > s.feasible() {
			t.Errorf("%s: fit ends at %d, above the feasible %d", s.name, f.batch, s.feasible())
		}
	}
}

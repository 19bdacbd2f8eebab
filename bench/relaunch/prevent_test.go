package main

import (
	"os"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
)

// What the prevention figures rest on: every shape that grows dies of OOM
// without prevention and never with it, losing no work; the shapes that
// only look like growth are never stopped; the fixes that name a cause
// (expandable_segments, fewer workers) are applied with the stop.
func TestPreventShapes(t *testing.T) {
	pol, err := policy.Parse("prevent.yaml", []byte(preventPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range growShapes {
		a, b := runGrow(pol, s, false), runGrow(pol, s, true)
		if !a.done || !b.done {
			t.Errorf("%s: did not finish (without %+v, with %+v)", s.name, a, b)
		}
		switch {
		case s.grows && (a.deaths == 0 || b.deaths != 0 || b.lost != 0 || b.stops == 0):
			t.Errorf("%s grows: without prevention %+v, with it %+v; want deaths without, none with", s.name, a, b)
		case !s.grows && (a.deaths != 0 || b.stops != 0 || b.deaths != 0):
			t.Errorf("%s only looks like growth: without prevention %+v, with it %+v; want no death and no stop", s.name, a, b)
		}
		if s.name == "fragmentation" && b.stops != 1 {
			t.Errorf("fragmentation: %d stops, want 1 (expandable_segments applied with the first)", b.stops)
		}
	}
}

// docs/performance.md quotes the table: it must be what the benchmark
// prints.
func TestPreventTableInDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	preventTable(&b)
	if !strings.Contains(string(doc), b.String()) {
		t.Errorf("docs/performance.md, section Prevention, does not quote the output of `go run ./bench/relaunch -prevent`:\n%s", b.String())
	}
}

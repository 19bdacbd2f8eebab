package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gpuguard/gpuguard/internal/explain"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// explainagrees DIR checks that `gpuguard explain DIR` agrees with the live
// verdict of every attempt the run journalled an end for: the same kind and
// the same phase. DIR may be "latest", the newest run under .gpuguard/runs.
// A run with no attempt_end that carries a verdict fails the check: it would
// show nothing.
func cmdExplainAgrees(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: explainagrees DIR")
	}
	dir := ts.MkAbs(args[0])
	if args[0] == "latest" {
		runs, err := filepath.Glob(ts.MkAbs(filepath.Join(".gpuguard", "runs", "*")))
		ts.Check(err)
		if len(runs) == 0 {
			ts.Fatalf("explainagrees latest: no run under .gpuguard/runs")
		}
		sort.Strings(runs)
		dir = runs[len(runs)-1]
	}
	f, err := os.Open(filepath.Join(dir, record.Events))
	ts.Check(err)
	entries, _, err := record.Read(f)
	f.Close()
	ts.Check(err)
	live := map[int]*classify.Verdict{}
	for _, e := range entries {
		if ev, _ := e.Event(); ev != nil {
			if end, ok := ev.(record.AttemptEnd); ok && end.Verdict != nil {
				live[end.Attempt] = end.Verdict
			}
		}
	}
	if len(live) == 0 {
		ts.Fatalf("explainagrees %s: the journal holds no attempt_end with a verdict", args[0])
	}
	var out, errs bytes.Buffer
	if err := explain.Command(explain.Options{Paths: []string{dir}, JSON: true, Stdout: &out, Stderr: &errs}); err != nil {
		ts.Fatalf("gpuguard explain %s: %v\n%s", dir, err, errs.String())
	}
	seen := 0
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Attempt int            `json:"attempt"`
			Kind    classify.Kind  `json:"kind"`
			Phase   classify.Phase `json:"phase"`
		}
		ts.Check(json.Unmarshal(sc.Bytes(), &r))
		v, ok := live[r.Attempt]
		if !ok {
			continue
		}
		seen++
		if r.Kind != v.Kind || r.Phase != v.Phase {
			ts.Fatalf("attempt %d: explain says %s in phase %q, the live verdict was %s in phase %q", r.Attempt, r.Kind, r.Phase, v.Kind, v.Phase)
		}
		ts.Logf("attempt %d: explain and the live verdict agree: %s, phase %q", r.Attempt, r.Kind, r.Phase)
	}
	if seen != len(live) {
		ts.Fatalf("explain gave %d of the %d attempts the journal has verdicts for:\n%s", seen, len(live), out.String())
	}
}

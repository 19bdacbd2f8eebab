package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gpuguard/gpuguard/internal/explain"
)

// explainconsole LOG DIR checks that `gpuguard explain --json LOG`, on the
// console log of a run (its output and gpuguard's lines, as a terminal or
// `#SBATCH -o` keeps them), says what `gpuguard explain --json DIR` says of
// its run directory: the same attempts, each with the same verdict, every
// field but the file's name.
func cmdExplainConsole(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: explainconsole LOG RUN_DIR")
	}
	read := func(path string) []map[string]any {
		var out, errs bytes.Buffer
		if err := explain.Command(explain.Options{Paths: []string{ts.MkAbs(path)}, JSON: true, Stdout: &out, Stderr: &errs}); err != nil {
			ts.Fatalf("gpuguard explain %s: %v\n%s", path, err, errs.String())
		}
		var rs []map[string]any
		sc := bufio.NewScanner(&out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r map[string]any
			ts.Check(json.Unmarshal(sc.Bytes(), &r))
			delete(r, "file")
			rs = append(rs, r)
		}
		return rs
	}
	console, run := read(args[0]), read(args[1])
	if len(console) != len(run) {
		ts.Fatalf("explain %s gives %d attempts, explain %s gives %d", args[0], len(console), args[1], len(run))
	}
	for i := range run {
		c, r := console[i], run[i]
		if !reflect.DeepEqual(c, r) {
			cj, _ := json.Marshal(c)
			rj, _ := json.Marshal(r)
			ts.Fatalf("attempt %v differs:\n%s: %s\n%s: %s", r["attempt"], args[0], cj, args[1], rj)
		}
		ts.Logf("attempt %v: the console log and the run directory agree: %v, phase %v", r["attempt"], r["kind"], r["phase"])
	}
}

package main

// testscript commands for the recovery scripts (testdata/script/recover_*).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

var (
	stepLine    = regexp.MustCompile(`^step (\d+) loss`)
	resumedLine = regexp.MustCompile(`^resumed from .* at step (\d+)`)
	bannerLine  = regexp.MustCompile(`^example: gpuguard's example training job`)
	digestLine  = regexp.MustCompile(`weights sha256 ([0-9a-f]{64})`)
)

// steps-once [RUN_DIR] checks, in the run's output.log, that every attempt of
// the example job trains consecutive steps from where it starts: step 1 for a
// fresh start, S+1 after "resumed from ... at step S". So no step at or below
// a checkpoint is trained twice, and none is skipped. Without RUN_DIR the
// single run under .gpuguard/runs is used.
func cmdStepsOnce(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 {
		ts.Fatalf("usage: steps-once [RUN_DIR]")
	}
	log := filepath.Join(runDirArg(ts, args), "output.log")
	f, err := os.Open(log)
	ts.Check(err)
	defer f.Close()
	prev, resumed, steps, resumes := 0, false, 0, 0
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case resumedLine.MatchString(line):
			prev, _ = strconv.Atoi(resumedLine.FindStringSubmatch(line)[1])
			resumed = true
			resumes++
		case bannerLine.MatchString(line):
			if !resumed {
				prev = 0
			}
		case stepLine.MatchString(line):
			n, _ := strconv.Atoi(stepLine.FindStringSubmatch(line)[1])
			if n != prev+1 {
				ts.Fatalf("%s:%d: step %d trained after step %d", log, ln, n, prev)
			}
			prev, resumed = n, false
			steps++
		}
	}
	ts.Check(sc.Err())
	if steps == 0 {
		ts.Fatalf("%s: no training steps found", log)
	}
	ts.Logf("%d steps trained, %d resumes, none twice beyond its checkpoint", steps, resumes)
}

// journal TYPE [KEY=VALUE...] checks that the run's events.jsonl has an event
// of TYPE whose fields have those values (compared as text).
func cmdJournal(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: journal TYPE [KEY=VALUE...]")
	}
	matches, err := filepath.Glob(ts.MkAbs(".gpuguard/runs/*/events.jsonl"))
	ts.Check(err)
	more, _ := filepath.Glob(ts.MkAbs("*/events.jsonl"))
	matches = append(matches, more...)
	if len(matches) == 0 {
		ts.Fatalf("no events.jsonl found")
	}
	found := false
	for _, path := range matches {
		data, err := os.ReadFile(path)
		ts.Check(err)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				ts.Fatalf("%s: bad line %q: %v", path, line, err)
			}
			if ev["type"] != args[0] {
				continue
			}
			ok := true
			for _, kv := range args[1:] {
				k, v, _ := strings.Cut(kv, "=")
				if fmt.Sprint(ev[k]) != v {
					ok = false
				}
			}
			found = found || ok
		}
	}
	if found == neg {
		ts.Fatalf("journal %s: found=%v", strings.Join(args, " "), found)
	}
}

// samedigest A B checks that two outputs of the example job end with the same
// weights digest.
func cmdSameDigest(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: samedigest A B")
	}
	var d [2]string
	for i, name := range args {
		m := digestLine.FindStringSubmatch(ts.ReadFile(name))
		if m == nil {
			ts.Fatalf("%s: no weights digest", name)
		}
		d[i] = m[1]
	}
	if (d[0] == d[1]) == neg {
		ts.Fatalf("digests %s and %s", d[0], d[1])
	}
}

func runDirArg(ts *testscript.TestScript, args []string) string {
	if len(args) == 1 {
		return ts.MkAbs(args[0])
	}
	dirs, err := filepath.Glob(ts.MkAbs(".gpuguard/runs/*"))
	ts.Check(err)
	if len(dirs) != 1 {
		ts.Fatalf("want one run under .gpuguard/runs, found %d", len(dirs))
	}
	return dirs[0]
}

package main

// Acceptance tests of the gpuguard command, as a user runs it: each script
// in testdata/script is a session (see the testscript package). The test
// binary is installed in the scripts' PATH as gpuguard (main) and as
// fake-trainer (supervisortest.Trainer, a program with scripted behaviour:
// `fake-trainer MODE ...` runs one of the modes registered below).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

func TestMain(m *testing.M) {
	supervisortest.Main(m, helpers, supervisortest.Programs("gpuguard", supervisortest.TrainerProgram))
}

var helpers = supervisortest.Modes("print", "mixed", "exit", "kill", "trap", "tree", "stdin", "printenv", "istty", "winsize").
	With(supervisortest.Helpers{"gpuguard": func([]string) int { main(); return 0 }, "leak": supervisortest.Leak})

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			// The recovery scripts run the built-in example job.
			examples, err := filepath.Abs("examples")
			env.Setenv("EXAMPLES", examples)
			return err
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfile":   cmdWaitFile,
			"gone":       cmdGone,
			"signal-run": cmdSignalRun,
			"steps-once": cmdStepsOnce,
			"journal":    cmdJournal,
			"webhook":    cmdWebhook,
			"prom":       cmdProm,
			"samedigest": cmdSameDigest,

			"explainagrees":  cmdExplainAgrees,  // explain_agree_test.go
			"explainconsole": cmdExplainConsole, // explain_console_test.go
		},
	})
}

// waitfile FILE [TEXT] waits (at most 30 s) until FILE exists and contains
// TEXT, as a user waits for a job to say it is ready.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfile FILE [TEXT]")
	}
	file := ts.MkAbs(args[0])
	text := ""
	if len(args) == 2 {
		text = args[1]
	}
	w, err := fsnotify.NewWatcher()
	ts.Check(err)
	defer w.Close()
	ts.Check(w.Add(filepath.Dir(file)))
	timeout := time.After(30 * time.Second)
	for {
		if data, err := os.ReadFile(file); err == nil && strings.Contains(string(data), text) {
			return
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			ts.Fatalf("watching %s: %v", file, err)
		case <-timeout:
			ts.Fatalf("timed out waiting for %q in %s", text, args[0])
		}
	}
}

// gone PIDFILE waits (at most 20 s) until every process whose pid is in
// PIDFILE has exited, and fails if one is still running.
func cmdGone(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: gone PIDFILE")
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, f := range strings.Fields(ts.ReadFile(args[0])) {
		pid, err := strconv.Atoi(f)
		ts.Check(err)
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // already gone
		}
		for running(pid) {
			left := time.Until(deadline)
			if left <= 0 {
				unix.Close(fd)
				ts.Fatalf("process %d is still running", pid)
			}
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		}
		unix.Close(fd)
	}
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// signal-run SIG RUNDIR sends signal SIG (TERM, INT, HUP, QUIT, USR1, USR2,
// KILL) to the gpuguard whose run directory is RUNDIR (its pid is in the
// run_start event), as kill(1) or Slurm would.
func cmdSignalRun(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: signal-run SIG RUNDIR")
	}
	sig := unix.SignalNum("SIG" + args[0])
	if sig == 0 {
		ts.Fatalf("unknown signal %q", args[0])
	}
	f, err := os.Open(filepath.Join(ts.MkAbs(args[1]), "events.jsonl"))
	ts.Check(err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev struct {
			Type string
			Pid  int
		}
		ts.Check(json.Unmarshal(sc.Bytes(), &ev))
		if ev.Type == "run_start" {
			ts.Check(syscall.Kill(ev.Pid, sig))
			return
		}
	}
	ts.Fatalf("no run_start event in %s", args[1])
}

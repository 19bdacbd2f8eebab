package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Reports in the format of NCCL's RAS documentation
// (docs/troubleshooting/ras.rst, NCCL 2.24 to 2.29).
const (
	rasHealthy = `Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         8         4         1         4        32   RUNNING      OK
`
	rasIncomplete = `Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (2.05s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  The missing rank: 21

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data
`
	rasDead = `Communicators... (0.01s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 3487984 on node 172.16.64.213 managing GPU 5
`
	rasMismatch = `Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4         8        32        32   RUNNING  MISMATCH

Warnings
========

#0-0 (27a079b828ff1a75) MISMATCH
  Communicator ranks have different collective operation counts
  26 ranks have launched up to operation 6650
  6 ranks have launched up to operation 6649
  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210
`
)

func TestRASSummary(t *testing.T) {
	for _, tc := range []struct {
		name, report string
		missing      bool
		want         []string
		not          string
	}{
		{"healthy", rasHealthy, false, []string{"group 0 (8 communicators of 4 ranks): RUNNING OK"}, "Process"},
		{"a rank missing", rasIncomplete, true, []string{"group 0 (1 communicator of 32 ranks): RUNNING INCOMPLETE",
			"Process 3487984 on node 172.16.64.213 managing GPU 5", "The missing rank: 21"}, "TIMEOUT"},
		{"a process dead", rasDead, true, []string{"1 job process is considered dead", "on node 172.16.64.213"}, ""},
		// Ranks at different collective counts: a snapshot of a job at
		// work, no proof of a hang.
		{"ranks out of step", rasMismatch, false, []string{"RUNNING MISMATCH"}, "Rank 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, missing := rasSummary(tc.report)
			if missing != tc.missing {
				t.Errorf("missing = %v, want %v (%s)", missing, tc.missing, sum)
			}
			for _, w := range tc.want {
				if !strings.Contains(sum, w) {
					t.Errorf("summary %q lacks %q", sum, w)
				}
			}
			if tc.not != "" && strings.Contains(sum, tc.not) {
				t.Errorf("summary %q has %q", sum, tc.not)
			}
		})
	}
	if sum, missing := rasSummary("Couldn't connect to localhost:28028\n"); sum != "" || missing {
		t.Errorf("no table: %q %v", sum, missing)
	}
}

// fakeRAS writes an ncclras that prints body (a shell script's tail).
func fakeRAS(t *testing.T, body string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ncclras")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestRunNCCLRAS(t *testing.T) {
	report := filepath.Join(t.TempDir(), "report")
	if err := os.WriteFile(report, []byte(rasIncomplete), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runNCCLRAS(context.Background(), fakeRAS(t, "cat "+report))
	if r.err != "" || !r.missing || r.report != rasIncomplete || !strings.Contains(r.summary, "The missing rank: 21") {
		t.Fatalf("INCOMPLETE report: %+v", r)
	}
	v := record.HangActivity{Verdict: "spinning", Detail: "spinning: pid 10 busy"}
	if !r.note(&v) || !strings.Contains(v.Detail, "; NCCL RAS: group 0") || v.NCCLRAS != r.summary {
		t.Errorf("note on a spin: %+v", v)
	}
	v = record.HangActivity{Verdict: "working", Detail: "silent but working"}
	if r.note(&v) {
		t.Errorf("a missing rank confirmed work as a hang: %+v", v)
	}

	// No NCCL job on the node: ncclras cannot connect.
	r = runNCCLRAS(context.Background(), fakeRAS(t, `echo "Couldn't connect to localhost:28028: Connection refused"; exit 1`))
	if r.summary != "" || !strings.Contains(r.err, "exit status 1: Couldn't connect") {
		t.Errorf("failed client: %+v", r)
	}
	// A client that hangs is cut at the deadline, and says so.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r = runNCCLRAS(ctx, fakeRAS(t, "exec sleep 600"))
	if r.summary != "" || !strings.Contains(r.err, "no report within") {
		t.Errorf("stuck client: %+v", r)
	}
	// A nil probe (no ncclras) gives nothing.
	var p *rasProbe
	if _, ok := p.wait(nil); ok {
		t.Error("nil probe answered")
	}
}

// A GPU spin (a kernel running, memory still, no CPU busy) is confirmed
// as a collective's by RAS reporting a rank missing, and named with this
// node's place in its group; a healthy report leaves it a suspicion.
func TestConfirmSpinOnTheGPU(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no py-spy
	gpuSpin := func() activitySnap {
		return activitySnap{at: time.Unix(1000, 0), root: 10,
			procs: []procfs.Activity{{PID: 10, Start: 5, State: 'S', Comm: "python3", CPUTicks: 100, IOKnown: true}},
			gpu:   []gpu.Sample{{ID: "gpu0", UsedBytes: 70 << 30, UtilKnown: true, GPUUtilPct: 100}}}
	}
	s0, s1 := gpuSpin(), gpuSpin()
	s1.at = s1.at.Add(time.Second)
	where := groupWhere(group.Spec{Rank: 1, Size: 2, Host: "n1"}, true)
	for _, tc := range []struct {
		name, report string
		confirmed    bool
		detail       []string
	}{
		{"a rank missing", rasIncomplete, true, []string{
			"spinning in a collective: the GPU runs a kernel (100%) with its memory still (0%)",
			"; NCCL RAS: group 0 (1 communicator of 32 ranks): RUNNING INCOMPLETE;", "The missing rank: 21",
			"; this node: group rank 1 of 2 on host n1"}},
		{"healthy", rasHealthy, false, []string{"spinning: the GPU runs a kernel", "RUNNING OK"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(s0, s1, nil)
			if v.Verdict != "spinning" || len(v.Busy) != 0 {
				t.Fatalf("verdict %s (busy %v): %s", v.Verdict, v.Busy, v.Detail)
			}
			report := filepath.Join(t.TempDir(), "report")
			if err := os.WriteFile(report, []byte(tc.report), 0o644); err != nil {
				t.Fatal(err)
			}
			p := &fakeProc{done: make(chan struct{})}
			confirmed, stacks, _, got := confirmSpin(p, &v, startNCCLRAS(fakeRAS(t, "exec /bin/cat "+report)), where)
			if confirmed != tc.confirmed || stacks != "" || got != tc.report {
				t.Errorf("confirmed %v, stacks %q, report kept %v", confirmed, stacks, got == tc.report)
			}
			for _, d := range tc.detail {
				if !strings.Contains(v.Detail, d) {
					t.Errorf("detail %q lacks %q", v.Detail, d)
				}
			}
		})
	}
}

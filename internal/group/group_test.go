package group

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

func TestResolve(t *testing.T) {
	slurm := []string{"SLURM_JOB_ID=42", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=2"}
	tr := []string{"torchrun", "--nnodes", "3", "--node_rank=2", "--rdzv-id", "job7", "train.py", "--node-rank", "9"}
	for _, tc := range []struct {
		name       string
		f          Flags
		argv, env  []string
		ok         bool
		rank, size int
		addr, dir  string
		id, err    string
	}{
		{name: "alone", f: Flags{Rank: -1, Size: -1}, argv: []string{"python", "train.py"}},
		{name: "off under Slurm", f: Flags{Group: "off", Rank: -1, Size: -1}, env: slurm},
		{name: "one Slurm task", f: Flags{Rank: -1, Size: -1}, env: []string{"SLURM_JOB_ID=42", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1"}},
		{name: "batch script (no step)", f: Flags{Rank: -1, Size: -1}, env: []string{"SLURM_JOB_ID=42", "SLURM_PROCID=0", "SLURM_NTASKS=2"}},
		{name: "Slurm step", f: Flags{Rank: -1, Size: -1}, env: slurm, ok: true, rank: 1, size: 2,
			dir: "/w/.gpuguard/runs/slurm-42-group", id: "slurm-42.0-restart0"},
		{name: "Slurm step requeued", f: Flags{Group: "auto", Rank: -1, Size: -1}, env: append(slurm, "SLURM_RESTART_COUNT=2"), ok: true, rank: 1, size: 2,
			dir: "/w/.gpuguard/runs/slurm-42-group", id: "slurm-42.0-restart2"},
		{name: "address and torchrun's flags", f: Flags{Group: "node0:29400", Rank: -1, Size: -1}, argv: tr, ok: true, rank: 2, size: 3, addr: "node0:29400", id: "job7"},
		{name: "module form", f: Flags{Group: "/shared/g", Rank: -1, Size: -1},
			argv: []string{"python3", "-m", "torch.distributed.run", "--nnodes=2", "--node-rank", "1", "t.py"}, ok: true, rank: 1, size: 2, dir: "/shared/g"},
		{name: "flags win", f: Flags{Group: "h:1", Rank: 0, Size: 4}, argv: tr, ok: true, rank: 0, size: 4, addr: "h:1", id: "job7"},
		{name: "fixed range", f: Flags{Group: "h:1", Rank: -1, Size: -1}, argv: []string{"torchrun", "--nnodes=2:2", "--node-rank=0", "t.py"}, ok: true, rank: 0, size: 2, addr: "h:1"},
		{name: "elastic", f: Flags{Group: "h:1", Rank: -1, Size: -1}, argv: []string{"torchrun", "--nnodes=1:4", "--node-rank=0", "t.py"}, err: "elastic"},
		{name: "Slurm's rank outside its step form", f: Flags{Group: "h:1", Rank: -1, Size: -1}, env: slurm, ok: true, rank: 1, size: 2, addr: "h:1", id: "slurm-42.0-restart0"},
		{name: "no rank", f: Flags{Group: "h:1", Rank: -1, Size: -1}, argv: []string{"python", "train.py"}, err: "give --group-rank and --group-size"},
		{name: "rank past size", f: Flags{Group: "h:1", Rank: 3, Size: 3}, err: "rank 3 is not in a group of 3"},
		{name: "after the script", f: Flags{Group: "h:1", Rank: -1, Size: -1}, argv: []string{"torchrun", "t.py", "--nnodes", "2", "--node-rank", "1"}, err: "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok, err := Resolve(tc.f, tc.argv, tc.env, "/w", "host")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || ok != tc.ok {
				t.Fatalf("ok %v err %v, want ok %v", ok, err, tc.ok)
			}
			if !ok {
				return
			}
			if s.Rank != tc.rank || s.Size != tc.size || s.Addr != tc.addr || s.Dir != tc.dir || s.ID != tc.id || s.Host != "host" || s.Timeout != DefaultTimeout {
				t.Errorf("spec %+v, want rank %d size %d addr %q dir %q id %q", s, tc.rank, tc.size, tc.addr, tc.dir, tc.id)
			}
		})
	}
}

func TestFirst(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rep := func(rank int, kind classify.Kind, code int, failedAt time.Time, peer bool) Report {
		return Report{Rank: rank, Verdict: classify.Verdict{Kind: kind}, Exit: classify.Exit{Code: code}, FailedAt: failedAt, StoppedForPeer: peer}
	}
	for _, tc := range []struct {
		name    string
		reports []Report
		want    int // rank; -1: none failed
	}{
		{"all succeeded", []Report{rep(0, classify.KindNone, 0, time.Time{}, false), rep(1, classify.KindNone, 0, time.Time{}, false)}, -1},
		{"OOM beats the earlier broken collective", []Report{rep(0, classify.KindCrash, 1, at(0), false), rep(1, classify.KindGPUOOM, 1, at(50), false)}, 1},
		{"earliest of two OOMs", []Report{rep(0, classify.KindGPUOOM, 1, at(30), false), rep(1, classify.KindGPUOOM, 1, at(10), false), rep(2, classify.KindHostOOM, 137, at(20), false)}, 1},
		{"a crash beats a peer stopped for it", []Report{rep(0, classify.KindNone, 143, time.Time{}, true), rep(1, classify.KindCrash, 1, at(5), false)}, 1},
		{"a failure line beats none", []Report{rep(0, classify.KindNone, 1, time.Time{}, false), rep(1, classify.KindCrash, 1, at(99), false)}, 1},
		{"tie to the lower rank", []Report{rep(2, classify.KindGPUOOM, 1, at(7), false), rep(1, classify.KindGPUOOM, 1, at(7), false)}, 1},
		{"only peers stopped", []Report{rep(0, classify.KindNone, 143, time.Time{}, true), rep(1, classify.KindNone, 143, time.Time{}, true)}, 0},
		{"an OOM a job survived still counts", []Report{rep(0, classify.KindGPUOOM, 0, at(1), false), rep(1, classify.KindNone, 0, time.Time{}, false)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := First(tc.reports)
			if tc.want < 0 {
				if ok {
					t.Fatalf("First = rank %d, want none", got.Rank)
				}
				return
			}
			if !ok || got.Rank != tc.want {
				t.Fatalf("First = rank %d (ok %v), want rank %d", got.Rank, ok, tc.want)
			}
		})
	}
}

func TestRound(t *testing.T) {
	r := NewRound(3, 3)
	if got := r.Notice(1); len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("first OOM notice stops %v, want [0 2]", got)
	}
	if got := r.Notice(2); got != nil {
		t.Fatalf("second notice stops %v, want nothing (once per attempt)", got)
	}
	if stop, done := r.Ended(Report{Rank: 1, Exit: classify.Exit{Code: 1}}); stop != nil || done {
		t.Fatalf("after the stop went out: stop %v done %v", stop, done)
	}
	if _, done := r.Ended(Report{Rank: 0, Exit: classify.Exit{Code: 143}, StoppedForPeer: true}); done {
		t.Fatal("done with 2 of 3 reports")
	}
	if _, done := r.Ended(Report{Rank: 0}); done {
		t.Fatal("a second report of the same rank counted")
	}
	if _, done := r.Ended(Report{Rank: 2, Exit: classify.Exit{Code: 143}, StoppedForPeer: true}); !done {
		t.Fatal("not done with every report")
	}

	// Without an OOM line, a member's failed end stops the others still
	// running; a success stops nobody.
	r = NewRound(1, 3)
	if stop, _ := r.Ended(Report{Rank: 2}); stop != nil {
		t.Fatalf("a success stops %v", stop)
	}
	if stop, _ := r.Ended(Report{Rank: 0, Exit: classify.Exit{Code: 1}}); len(stop) != 1 || stop[0] != 1 {
		t.Fatalf("a crash stops %v, want [1]", stop)
	}
}

// A leader and two members over real TCP: the members join, an OOM notice
// from one stops the other and the leader, the reports reach the leader,
// and the decision and go reach every member.
func TestLeaderAndMembers(t *testing.T) {
	spec := Spec{Addr: "127.0.0.1:0", ID: "g", Size: 3, Host: "h0", Timeout: 10 * time.Second}
	spec.Dir = t.TempDir()
	spec.Addr = ""
	ld, err := Listen(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	var ms []*Member
	for r := 1; r < 3; r++ {
		s := spec
		s.Rank, s.Host = r, "h"+string(rune('0'+r))
		m, err := Join(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m)
	}
	if err := ld.WaitJoined(nil); err != nil {
		t.Fatal(err)
	}
	ld.Begin(Go{Attempt: 1})
	for _, m := range ms {
		if g, _, err := m.AwaitGo(0, nil); err != nil || g.Attempt != 1 {
			t.Fatalf("go %+v %v", g, err)
		}
	}
	ms[0].OOM(1, Notice{Rank: 1, Host: "h1", Kind: classify.KindGPUOOM})
	if n := <-ms[1].Stops(); n.Rank != 1 || n.Attempt != 1 {
		t.Fatalf("member 2 got stop %+v", n)
	}
	if n := <-ld.Stops(); n.Rank != 1 {
		t.Fatalf("leader got stop %+v", n)
	}
	ms[0].Ended(Report{Attempt: 1, Host: "h1", Verdict: classify.Verdict{Kind: classify.KindGPUOOM}, Exit: classify.Exit{Code: 1}})
	ms[1].Ended(Report{Attempt: 1, Host: "h2", Exit: classify.Exit{Code: 143}, StoppedForPeer: true})
	reps, err := ld.Collect(Report{Rank: 0, Attempt: 1, Exit: classify.Exit{Code: 143}, StoppedForPeer: true}, nil)
	if err != nil || len(reps) != 3 {
		t.Fatalf("reports %v, %v", reps, err)
	}
	first, ok := First(reps)
	if !ok || first.Rank != 1 || first.Host != "h1" {
		t.Fatalf("first %+v", first)
	}
	ld.Decide(Decision{Attempt: 1, Verb: "relaunch", From: &first})
	ld.Begin(Go{Attempt: 2, Checkpoint: "/c"})
	for _, m := range ms {
		d, err := m.AwaitDecision(1, nil)
		if err != nil || d.From == nil || d.From.Rank != 1 {
			t.Fatalf("decision %+v %v", d, err)
		}
		if g, _, err := m.AwaitGo(1, nil); err != nil || g.Attempt != 2 || g.Checkpoint != "/c" {
			t.Fatalf("go %+v %v", g, err)
		}
	}
	// The leader ends before attempt 3's go: the members hear of it.
	ld.Decide(Decision{Attempt: 3, Verb: "give_up", Reason: "the leader ended"})
	for _, m := range ms {
		if g, end, err := m.AwaitGo(2, nil); err != nil || end == nil || end.Reason != "the leader ended" {
			t.Fatalf("after the leader's end: go %+v, end %+v, %v", g, end, err)
		}
	}
}

// A member of another group, or of a size the leader does not have, is
// refused at once with a message saying why.
func TestRefused(t *testing.T) {
	spec := Spec{Addr: "127.0.0.1:0", ID: "g", Size: 2, Timeout: 5 * time.Second}
	ld, err := Listen(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	for _, tc := range []struct {
		id   string
		size int
		want string
	}{{"other", 2, `leads group "g", not "other"`}, {"g", 3, "has 2 members"}} {
		s := Spec{Addr: ld.Addr(), ID: tc.id, Size: tc.size, Rank: 1, Timeout: 5 * time.Second}
		_, err := Join(s, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("join %+v: %v, want %q", s, err, tc.want)
		}
	}
}

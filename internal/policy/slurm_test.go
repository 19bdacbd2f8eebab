package policy

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSlurmSection(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      Slurm
	}{
		{"absent: never requeue", "version: 1\n",
			Slurm{StopAfter: time.Minute, MaxRequeues: 10}},
		{"bare section: SIGUSR2", "version: 1\nslurm:\n",
			Slurm{RequeueOn: []syscall.Signal{syscall.SIGUSR2}, StopAfter: time.Minute, MaxRequeues: 10}},
		{"empty mapping: SIGUSR2", "version: 1\nslurm: {}\n",
			Slurm{RequeueOn: []syscall.Signal{syscall.SIGUSR2}, StopAfter: time.Minute, MaxRequeues: 10}},
		{"all keys", "version: 1\nslurm:\n  requeue_on: [SIGUSR2, SIGTERM]\n  stop_after: 45s\n  max_requeues: 3\n",
			Slurm{RequeueOn: []syscall.Signal{syscall.SIGUSR2, syscall.SIGTERM}, StopAfter: 45 * time.Second, MaxRequeues: 3}},
		{"short and lower-case names, one signal", "version: 1\nslurm: {requeue_on: usr1}\n",
			Slurm{RequeueOn: []syscall.Signal{syscall.SIGUSR1}, StopAfter: time.Minute, MaxRequeues: 10}},
		{"order kept", "version: 1\nslurm: {requeue_on: [TERM, sigint, SIGHUP, QUIT, USR2]}\n",
			Slurm{RequeueOn: []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR2}, StopAfter: time.Minute, MaxRequeues: 10}},
		{"empty list turns it off", "version: 1\nslurm: {requeue_on: [], stop_after: 5s}\n",
			Slurm{StopAfter: 5 * time.Second, MaxRequeues: 10}},
		{"null turns it off", "version: 1\nslurm: {requeue_on: null}\n",
			Slurm{StopAfter: time.Minute, MaxRequeues: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			got := p.Slurm()
			if got.StopAfter != tc.want.StopAfter || got.MaxRequeues != tc.want.MaxRequeues || !sameSignals(got.RequeueOn, tc.want.RequeueOn) {
				t.Errorf("Slurm() = %+v, want %+v", got, tc.want)
			}
			for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT} {
				want := false
				for _, w := range tc.want.RequeueOn {
					want = want || w == sig
				}
				if got.requeues(sig) != want {
					t.Errorf("requeues(%s) = %v, want %v", SignalName(sig), got.requeues(sig), want)
				}
			}
		})
	}
}

func TestSlurmReturnsACopy(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\nslurm: {requeue_on: [SIGUSR2, SIGTERM]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Slurm()
	s.RequeueOn[0] = syscall.SIGKILL
	if got := p.Slurm().RequeueOn[0]; got != syscall.SIGUSR2 {
		t.Errorf("changing the returned slice changed the policy: RequeueOn[0] = %v", got)
	}
}

func TestSlurmErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"unknown key", "version: 1\nslurm: {requeue-on: [SIGUSR2]}\n",
			[]string{`f.yaml:2:9: slurm: unknown key "requeue-on" (did you mean "requeue_on"?); allowed: requeue_on, stop_after, max_requeues, exclude_failed_nodes`}},
		{"not a mapping", "version: 1\nslurm: [SIGUSR2]\n",
			[]string{"f.yaml:2:8: slurm must be a mapping (key: value lines), not a list"}},
		{"misspelt signal", "version: 1\nslurm: {requeue_on: [SIGUSR3]}\n",
			[]string{`f.yaml:2:22: slurm requeue_on: "SIGUSR3" is not a signal gpuguard can act on (did you mean "SIGUSR1"?); use one of SIGUSR2, SIGUSR1, SIGTERM, SIGINT, SIGHUP, SIGQUIT (SIGUSR2 is the safe choice: ask Slurm for it with #SBATCH --signal=B:USR2@120)`}},
		{"short misspelt signal", "version: 1\nslurm: {requeue_on: TREM}\n",
			[]string{`f.yaml:2:21: slurm requeue_on: "TREM" is not a signal gpuguard can act on (did you mean "SIGTERM"?); use one of SIGUSR2, SIGUSR1, SIGTERM, SIGINT, SIGHUP, SIGQUIT (SIGUSR2 is the safe choice: ask Slurm for it with #SBATCH --signal=B:USR2@120)`}},
		{"uncatchable", "version: 1\nslurm: {requeue_on: [SIGKILL]}\n",
			[]string{`f.yaml:2:22: slurm requeue_on: SIGKILL cannot be caught, so gpuguard never sees it; Slurm's KillWait SIGKILL comes too late to save anything: ask Slurm for a warning signal instead (#SBATCH --signal=B:USR2@120) and list SIGUSR2`}},
		{"number", "version: 1\nslurm: {requeue_on: [12]}\n",
			[]string{`f.yaml:2:22: slurm requeue_on: "12" is not a signal gpuguard can act on; use one of SIGUSR2, SIGUSR1, SIGTERM, SIGINT, SIGHUP, SIGQUIT (SIGUSR2 is the safe choice: ask Slurm for it with #SBATCH --signal=B:USR2@120)`}},
		{"twice", "version: 1\nslurm: {requeue_on: [USR2, SIGUSR2]}\n",
			[]string{`f.yaml:2:28: slurm requeue_on: SIGUSR2 is listed twice`}},
		{"zero stop_after", "version: 1\nslurm: {stop_after: 0s}\n",
			[]string{"f.yaml:2:21: slurm stop_after must be above 0: the job needs time to save a checkpoint after the signal"}},
		{"stop_after without unit", "version: 1\nslurm: {stop_after: 60}\n",
			[]string{`f.yaml:2:21: slurm stop_after must be a duration such as "30s" or "2m", not "60"; write it with a unit, e.g. "60s"`}},
		{"max_requeues zero", "version: 1\nslurm: {max_requeues: 0}\n",
			[]string{"f.yaml:2:23: slurm max_requeues must be at least 1, not 0"}},
		{"exclude_failed_nodes negative", "version: 1\nslurm: {exclude_failed_nodes: -1}\n",
			[]string{"f.yaml:2:31: slurm exclude_failed_nodes must be at least 0, not -1"}},
		{"exclude_failed_nodes not a number", "version: 1\nslurm:\n  exclude_failed_nodes: yes\n",
			[]string{`f.yaml:3:25: slurm exclude_failed_nodes must be a whole number, not "yes"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded; want %q", tc.want)
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n got: %q\nwant: %q", got, tc.want)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Errorf("error is not a *policy.Error: %#v", err)
			}
		})
	}
}

func sameSignals(a, b []syscall.Signal) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// requeues reports whether sig is one of the signals after which the job is
// requeued.
func (s Slurm) requeues(sig syscall.Signal) bool {
	for _, r := range s.RequeueOn {
		if r == sig {
			return true
		}
	}
	return false
}

func TestSlurmExcludeFailedNodesParsed(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\nslurm: {exclude_failed_nodes: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Slurm().ExcludeFailedNodes; got != 2 {
		t.Errorf("ExcludeFailedNodes = %d, want 2", got)
	}
	if got := DefaultSlurm.ExcludeFailedNodes; got != 0 {
		t.Errorf("default ExcludeFailedNodes = %d, want 0 (off)", got)
	}
}

func TestSlurmExcludeNode(t *testing.T) {
	on := Slurm{ExcludeFailedNodes: 2}
	for _, tc := range []struct {
		name     string
		s        Slurm
		excluded []string
		node     string
		machine  bool
		want     bool
		why      string
	}{
		{"machine failure, first node", on, nil, "n1", true, true,
			"the failure points at node n1; node 1 of at most 2 left out (slurm.exclude_failed_nodes)"},
		{"machine failure, second node", on, []string{"n1"}, "n2", true, true,
			"the failure points at node n2; node 2 of at most 2 left out (slurm.exclude_failed_nodes)"},
		{"limit reached", on, []string{"n1", "n2"}, "n3", true, false,
			"2 node(s) left out already (n1,n2), the limit of slurm.exclude_failed_nodes: 2"},
		{"not the machine", on, nil, "n1", false, false, "the failure does not point at the machine"},
		{"off", Slurm{}, nil, "n1", true, false, "slurm.exclude_failed_nodes is 0 (off)"},
		{"node unknown", on, nil, "", true, false, "the node the attempt ran on is not known (no SLURMD_NODENAME)"},
		{"left out already", on, []string{"n1"}, "n1", true, false, "node n1 was left out already, yet the job ran on it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := tc.s.ExcludeNode(tc.excluded, tc.node, tc.machine)
			if got != tc.want || why != tc.why {
				t.Errorf("ExcludeNode(%v, %q, %v) = %v, %q; want %v, %q", tc.excluded, tc.node, tc.machine, got, why, tc.want, tc.why)
			}
		})
	}
}

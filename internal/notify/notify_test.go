package notify

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// sink is a local webhook: it keeps the documents posted to it.
type sink struct {
	mu   sync.Mutex
	docs []Document
	raw  []string
}

func newSink(t *testing.T, status int) (*sink, *httptest.Server) {
	s := &sink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var d Document
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &d) != nil {
			t.Errorf("bad request %s %q: %s", r.Method, r.Header.Get("Content-Type"), body)
		}
		s.mu.Lock()
		s.docs = append(s.docs, d)
		s.raw = append(s.raw, string(body))
		s.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return s, srv
}

// events is a run that relaunches once after an out-of-memory error.
func events() []record.Event {
	return []record.Event{
		record.RunStart{Argv: []string{"python", "train.py"}, RunDir: "/runs/r1"},
		record.Policy{File: "gpuguard.yaml"},
		record.AttemptStart{Attempt: 1},
		record.AttemptEnd{Attempt: 1, ExitCode: 1, Verdict: &classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain}},
		record.Decision{Attempt: 1, Verb: "relaunch", Rule: "train-oom", Step: 1,
			Changes: []record.Change{{Name: "batch_size", Old: record.Text("32"), New: record.Text("16")}}},
		record.AttemptStart{Attempt: 2},
		record.AttemptEnd{Attempt: 2},
		record.Decision{Attempt: 2, Verb: "done"},
		record.RunEnd{ExitCode: 0},
	}
}

func feed(n *Notifier, evs []record.Event) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, ev := range evs {
		n.Observe(t0.Add(time.Duration(i)*time.Second), ev)
	}
}

func TestWebhookAndCommand(t *testing.T) {
	s, srv := newSink(t, http.StatusOK)
	out := filepath.Join(t.TempDir(), "notes.jsonl")
	var warns []string
	n := Start(Config{URL: srv.URL, Command: `cat >> "$NOTES"; echo "$GPUGUARD_EVENT: $GPUGUARD_TEXT" >> "$NOTES.txt"`, Host: "node7",
		Warn: func(m string) { warns = append(warns, m) }})
	t.Setenv("NOTES", out)
	feed(n, events())
	n.Close()
	if len(warns) > 0 {
		t.Errorf("warnings: %q", warns)
	}
	var kinds []string
	for _, d := range s.docs {
		kinds = append(kinds, d.Event)
	}
	if strings.Join(kinds, " ") != "run_start relaunch run_end" {
		t.Fatalf("posted %q", kinds)
	}
	rel := s.docs[1]
	if rel.Attempt != 1 || rel.Failure != "gpu_oom in train" || len(rel.Changes) != 1 || rel.Changes[0] != "batch_size 32→16" ||
		rel.Host != "node7" || rel.RunDir != "/runs/r1" || strings.Join(rel.Command, " ") != "python train.py" {
		t.Errorf("relaunch document %+v", rel)
	}
	if rel.Text != "attempt 1 died of gpu_oom in train: relaunching (rule train-oom step 1: batch_size 32→16)" {
		t.Errorf("text %q", rel.Text)
	}
	// The record is the event as events.jsonl holds it.
	var rec struct {
		Type    string
		Attempt int
		Changes []record.Change
	}
	if err := json.Unmarshal(rel.Record, &rec); err != nil || rec.Type != "decision" || rec.Attempt != 1 || len(rec.Changes) != 1 {
		t.Errorf("record %s (%v)", rel.Record, err)
	}
	// The command got the same documents on stdin, one a line.
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	if strings.Join(lines, "\n") != strings.Join(s.raw, "\n") {
		t.Errorf("command's stdin:\n%s\nwebhook got:\n%s", strings.Join(lines, "\n"), strings.Join(s.raw, "\n"))
	}
	txt, _ := os.ReadFile(out + ".txt")
	if !strings.Contains(string(txt), "relaunch: attempt 1 died of gpu_oom in train") {
		t.Errorf("command's environment: %q", txt)
	}
}

func TestGiveUp(t *testing.T) {
	s, srv := newSink(t, http.StatusNoContent)
	n := Start(Config{URL: srv.URL})
	feed(n, []record.Event{
		record.RunStart{Argv: []string{"job"}},
		record.AttemptEnd{Attempt: 3, ExitCode: 1, Verdict: &classify.Verdict{Kind: classify.KindGPUOOM}},
		record.Decision{Attempt: 3, Verb: "give_up", Reason: "budget spent"},
		record.RunEnd{ExitCode: 1},
	})
	n.Close()
	if len(s.docs) != 3 || s.docs[1].Event != "give_up" || s.docs[1].Text != "attempt 3 died of gpu_oom: giving up: budget spent" ||
		s.docs[2].Text != "job ended with exit status 1" {
		t.Errorf("documents %+v", s.docs)
	}
}

// A failing webhook or command is said once each, and the token in the
// webhook's path is not shown.
func TestFailuresSaidOnce(t *testing.T) {
	_, srv := newSink(t, http.StatusInternalServerError)
	var warns []string
	var mu sync.Mutex
	n := Start(Config{URL: srv.URL + "/hooks/SECRET", Command: "echo nope >&2; exit 3",
		Warn: func(m string) { mu.Lock(); warns = append(warns, m); mu.Unlock() }})
	feed(n, events())
	n.Close()
	if len(warns) != 2 {
		t.Fatalf("warnings %q", warns)
	}
	all := strings.Join(warns, "\n")
	if strings.Contains(all, "SECRET") || !strings.Contains(all, "500") || !strings.Contains(all, "exit status 3: nope") {
		t.Errorf("warnings %q", warns)
	}
}

// A webhook that never answers and a command that never ends delay neither
// Observe nor, beyond the drain time, Close.
func TestHangingDestinationsAreBounded(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	var warns []string
	var mu sync.Mutex
	n := Start(Config{URL: srv.URL, Command: "sleep 30", Timeout: 300 * time.Millisecond, Drain: 500 * time.Millisecond,
		Warn: func(m string) { mu.Lock(); warns = append(warns, m); mu.Unlock() }})
	start := time.Now()
	for range 1000 { // more than the queue holds
		feed(n, events())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Observe took %s", d)
	}
	start = time.Now()
	n.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %s", d)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(warns, "\n")
	for _, want := range []string{"not going out fast enough", "not sent within 500ms"} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in %q", want, warns)
		}
	}
}

func TestNone(t *testing.T) {
	n := Start(Config{})
	if n != nil {
		t.Fatal("a notifier without destinations")
	}
	n.Observe(time.Now(), record.RunEnd{}) // a nil Notifier does nothing
	n.Close()
}

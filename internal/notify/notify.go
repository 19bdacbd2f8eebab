// Package notify tells the user's own tools what an unattended run is doing:
// it turns the events a run directory records (rundir.Dir.OnWrite) that
// matter to someone away from the terminal (the run's start, each decision
// to relaunch, give up or requeue, the run's end) into one JSON Document
// each, and posts it to a webhook and/or pipes it to a command's stdin.
//
// A notification never stops or delays the run: Observe only queues, one
// goroutine delivers with a bounded time per delivery, and Close gives what
// is still queued a bounded time to go out. The first failure of each
// destination is said once through Config.Warn; later ones are dropped.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/redact"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Defaults of Config.
const (
	DefaultTimeout = 10 * time.Second // one delivery: the POST, or the command
	DefaultDrain   = 10 * time.Second // what is queued when the run ends
	queueSize      = 256
)

// Config says where notifications go. Empty URL and Command: none.
type Config struct {
	URL     string // POST each Document here (Content-Type application/json)
	Command string // run `sh -c Command` with each Document on stdin
	Timeout time.Duration
	Drain   time.Duration
	Warn    func(msg string) // gpuguard's status line; nil: failures are dropped
	Host    string           // the host named in documents; "" means os.Hostname
}

// Document is what one notification says. Event is run_start, relaunch,
// give_up, requeue or run_end; Text is one line for people (a mail subject,
// a chat message); Record is the event as events.jsonl holds it.
type Document struct {
	Event   string          `json:"event"`
	Time    string          `json:"time"` // RFC 3339, the event's
	Host    string          `json:"host"`
	RunDir  string          `json:"run_dir"`
	Command []string        `json:"command"`
	Attempt int             `json:"attempt,omitempty"`
	Failure string          `json:"failure,omitempty"` // decisions: what the attempt died of (the classifier's kind)
	Changes []string        `json:"changes,omitempty"` // relaunch: "name old→new"
	Text    string          `json:"text"`
	Record  json.RawMessage `json:"record"`
}

// Notifier delivers Documents. Its methods are safe for concurrent use; a
// nil *Notifier does nothing.
type Notifier struct {
	cfg    Config
	client *http.Client
	queue  chan Document
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	dropped int
	// What documents carry, from earlier events.
	runDir  string
	argv    []string
	failure string // the last attempt's, for the decision that follows

	warnMu sync.Mutex
	warned map[string]bool
}

// Start starts delivering to cfg's destinations; it returns nil when cfg
// has none.
func Start(cfg Config) *Notifier {
	if cfg.URL == "" && cfg.Command == "" {
		return nil
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Drain <= 0 {
		cfg.Drain = DefaultDrain
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	n := &Notifier{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.Timeout},
		queue:  make(chan Document, queueSize),
		done:   make(chan struct{}),
		warned: map[string]bool{},
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.deliverAll()
	return n
}

// Observe queues the notification of ev, if it is one that matters; it
// never blocks (rundir.Dir.OnWrite calls it under the journal's lock).
func (n *Notifier) Observe(t time.Time, ev record.Event) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	doc, ok := n.document(t, ev)
	if !ok {
		return
	}
	select {
	case n.queue <- doc:
	default:
		n.dropped++
		if n.dropped == 1 {
			go n.warnOnce("queue", fmt.Sprintf("notifications are not going out fast enough: %d queued, dropping newer ones", queueSize))
		}
	}
}

// document makes ev's Document; false for events that are not notified.
// Called with n.mu held.
func (n *Notifier) document(t time.Time, ev record.Event) (Document, bool) {
	doc := Document{Event: ev.EventType(), Time: t.Format(time.RFC3339Nano)}
	switch e := ev.(type) {
	case record.RunStart:
		n.runDir, n.argv = e.RunDir, redact.Argv(e.Argv) // a document never holds a secret (docs/secrets.md)
		doc.Text = fmt.Sprintf("started %s (run directory %s)", shortCommand(n.argv), e.RunDir)
	case record.AttemptEnd:
		n.failure = failureOf(e)
		return doc, false
	case record.Decision:
		doc.Attempt = e.Attempt
		doc.Failure = n.failure
		died := fmt.Sprintf("attempt %d", e.Attempt)
		if n.failure != "" {
			died += " died of " + n.failure
		}
		switch e.Verb {
		case "relaunch":
			doc.Event = "relaunch"
			for _, c := range e.Changes {
				doc.Changes = append(doc.Changes, fmt.Sprintf("%s %s→%s", c.Name, showValue(c.Old), showValue(c.New)))
			}
			doc.Text = fmt.Sprintf("%s: relaunching", died)
			if e.Rule != "" {
				doc.Text += fmt.Sprintf(" (rule %s step %d", e.Rule, e.Step)
				if len(doc.Changes) > 0 {
					doc.Text += ": " + strings.Join(doc.Changes, ", ")
				}
				doc.Text += ")"
			}
		case "give_up":
			doc.Event = "give_up"
			doc.Text = fmt.Sprintf("%s: giving up: %s", died, e.Reason)
		case "requeue":
			doc.Event = "requeue"
			doc.Text = fmt.Sprintf("%s received: the Slurm job is requeued", e.Signal)
		default: // done: the run's end says it
			return doc, false
		}
	case record.RunEnd:
		doc.Text = fmt.Sprintf("%s ended with exit status %d", shortCommand(n.argv), e.ExitCode)
	default:
		return doc, false
	}
	doc.Host, doc.RunDir, doc.Command = n.cfg.Host, n.runDir, n.argv
	doc.Text = redact.Text(doc.Text) // a decision's reason may quote the command
	doc.Record = json.RawMessage(bytes.TrimSpace(record.Marshal(t, ev)))
	return doc, true
}

func failureOf(e record.AttemptEnd) string {
	if e.Verdict != nil && e.Verdict.Kind != classify.KindNone && e.Verdict.Kind != "" {
		s := string(e.Verdict.Kind)
		if e.Verdict.Phase != "" {
			s += " in " + string(e.Verdict.Phase)
		}
		return s
	}
	if e.ExitCode != 0 {
		return fmt.Sprintf("exit status %d", e.ExitCode)
	}
	return ""
}

func showValue(v record.Value) string {
	if v.Null {
		return "unset"
	}
	return v.Text
}

func shortCommand(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	if s == "" {
		s = "the run"
	}
	return s
}

// Close stops taking notifications and gives those queued up to
// Config.Drain to go out; what is left then is dropped and said.
func (n *Notifier) Close() {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.queue)
	n.mu.Unlock()
	t := time.NewTimer(n.cfg.Drain)
	defer t.Stop()
	select {
	case <-n.done:
	case <-t.C:
		left := len(n.queue) + 1 // and the one in flight
		n.cancel()
		<-n.done
		n.warnOnce("drain", fmt.Sprintf("%d notification(s) not sent within %s of the run's end", left, n.cfg.Drain))
	}
	n.cancel()
}

func (n *Notifier) deliverAll() {
	defer close(n.done)
	for doc := range n.queue {
		if n.ctx.Err() != nil {
			continue // past the drain time: drop
		}
		body, err := json.Marshal(doc)
		if err != nil {
			continue // a Document always encodes
		}
		if n.cfg.URL != "" {
			if err := n.post(body); err != nil && n.ctx.Err() == nil {
				n.warnOnce("url", fmt.Sprintf("cannot notify %s: %v; the run goes on (later notification failures are not shown)", showURL(n.cfg.URL), err))
			}
		}
		if n.cfg.Command != "" {
			if err := n.run(doc, body); err != nil && n.ctx.Err() == nil {
				n.warnOnce("command", fmt.Sprintf("notify command %q failed: %s; the run goes on (later notification failures are not shown)", redact.Text(n.cfg.Command), redact.Text(err.Error())))
			}
		}
	}
}

func (n *Notifier) post(body []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return redactErr(err, n.cfg.URL)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpuguard")
	resp, err := n.client.Do(req)
	if err != nil {
		return redactErr(err, n.cfg.URL)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP status %s", resp.Status)
	}
	return nil
}

// run runs the command in a process group of its own, killed whole at the
// timeout, with the document on stdin and its event and text in the
// environment (GPUGUARD_EVENT, GPUGUARD_TEXT).
func (n *Notifier) run(doc Document, body []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", n.cfg.Command)
	cmd.Stdin = bytes.NewReader(append(body, '\n'))
	cmd.Env = append(os.Environ(), "GPUGUARD_EVENT="+doc.Event, "GPUGUARD_TEXT="+doc.Text)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("still running after %s: killed", n.cfg.Timeout)
	}
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			if len(msg) > 200 {
				msg = msg[:200] + "..."
			}
			return fmt.Errorf("%v: %s", err, msg)
		}
		return err
	}
	return nil
}

func (n *Notifier) warnOnce(key, msg string) {
	n.warnMu.Lock()
	defer n.warnMu.Unlock()
	if n.cfg.Warn == nil || n.warned[key] {
		return
	}
	n.warned[key] = true
	n.cfg.Warn(msg)
}

// showURL is the URL as status lines show it: scheme and host, since a
// webhook's path and query often hold its secret token.
func showURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the notification URL"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// redactErr is err with the URL (which *url.Error repeats) redacted.
func redactErr(err error, raw string) error {
	if ue, ok := err.(*url.Error); ok {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), raw, showURL(raw)))
}

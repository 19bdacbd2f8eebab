package supervisor

import (
	"unicode/utf8"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/settings"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// verifyHook checks that a relaunch's changes took hold. After a relaunch
// that changed knobs, it reads from the next attempt's output the value the
// job says it uses for each (its start-up echo of its settings: package
// settings), and compares it with the value set. Each comparison is said and
// journalled (record.Verify). A change that did not take hold (the job
// restored the old value from its checkpoint) goes to the policy with the
// outcome (policy.Outcome.Unapplied): that attempt is no evidence about the
// knob, and the policy gives up saying why, or relaunches without the
// checkpoint (verify: {unapplied: drop_checkpoint}; this hook then starts
// the attempt without one).
//
// The output is the only source: the torch probe's batch dimension is not
// read (a model's input batch is not always the knob: packed sequences,
// micro-batches).
type verifyHook struct {
	l *loop
	// attempt is the attempt whose output is read (0: none), want the
	// changes to check in it, reader their keys' reader (nil: none).
	attempt int
	want    []verifyWant
	reader  *settings.Reader
	// seen: the last value the attempt's output gave for each wanted knob
	// (scanner goroutine; read once the output is scanned). buf is
	// settings.Reader.Append's, reused.
	seen map[string]verifySeen
	buf  []settings.Seen
	// unapplied: the changes attempt did not run with (asking passes them
	// to the policy); fresh: the attempt that starts without a checkpoint.
	unapplied []policy.Unapplied
	fresh     int
}

// verifyWant is a knob a relaunch changed, the value it set and the value
// before.
type verifyWant struct {
	knob, set, old string
}

// verifySeen is a value the job's output gave for a knob, and where.
type verifySeen struct {
	value, stream, text string
	line                int
}

// maxVerifyText bounds the line quoted in messages and in the journal.
const maxVerifyText = 200

func newVerifyHook(l *loop) *verifyHook { return &verifyHook{l: l} }

// attemptStarting forgets what an earlier attempt's output said.
func (h *verifyHook) attemptStarting(a *attemptRun) {
	if a.n == h.attempt {
		h.seen = map[string]verifySeen{}
	}
}

// line reads the values the attempt's output gives for the changed knobs;
// the last one the job prints is the one it runs with.
func (h *verifyHook) line(a *attemptRun, ln lines.Line) {
	if h.reader == nil || a.n != h.attempt {
		return
	}
	h.buf = h.reader.Append(h.buf[:0], ln.Text)
	for _, s := range h.buf {
		text := string(ln.Text)
		if len(text) > maxVerifyText {
			cut := maxVerifyText
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			text = text[:cut] + "…"
		}
		h.seen[s.Knob] = verifySeen{value: s.Value, stream: a.stream, text: text, line: ln.Num}
	}
}

// settle compares, once the attempt ended, the values the job used with
// the values set, and says each.
func (h *verifyHook) settle(o *outcome) (int, action) {
	h.unapplied = nil
	if o.n != h.attempt || h.reader == nil {
		return 0, goOn
	}
	for _, w := range h.want {
		s, ok := h.seen[w.knob]
		if !ok {
			h.l.log.Debug("no value of the changed knob in the output: " + w.knob)
			continue
		}
		same, comparable := settings.Compare(w.set, s.value)
		if !comparable {
			continue
		}
		if wasOld, _ := settings.Compare(w.old, s.value); !same && !wasOld {
			// Neither the value set nor the one before: more likely another
			// setting under the same key than the job's own choice.
			h.l.job.Status.Printf("attempt %d: %s: line %d says %s, neither %s as set nor %s as before: not taken as evidence either way (%q)",
				o.n, w.knob, s.line, s.value, w.set, w.old, s.text)
			continue
		}
		h.l.job.RunDir.Write(record.Verify{Attempt: o.n, Knob: w.knob, Set: w.set, Used: s.value, Held: same,
			Line: s.line, Stream: s.stream, Text: s.text})
		if same {
			h.l.job.Status.Printf("attempt %d: %s %s confirmed: line %d: %q", o.n, w.knob, w.set, s.line, s.text)
			continue
		}
		u := policy.Unapplied{Knob: w.knob, Set: w.set, Used: s.value, Line: s.line, Text: s.text}
		if o.row.ckpt != "" {
			u.Checkpoint = displayPath(o.row.ckpt, h.l.wd)
		}
		h.unapplied = append(h.unapplied, u)
		h.l.job.Status.Printf("attempt %d: %s; the attempt is no evidence about %s", o.n, u, w.knob)
	}
	return 0, goOn
}

// asking tells the policy which changes the attempt did not run with.
func (h *verifyHook) asking(out *policy.Outcome) {
	if out.Attempt == h.attempt {
		out.Unapplied = h.unapplied
	}
}

// revise notes a relaunch without the checkpoint, for beforeAttempt.
func (h *verifyHook) revise(o *outcome, _ *policy.Outcome, d policy.Decision) (policy.Decision, int, action) {
	if d.Verb == policy.Relaunch && d.FromScratch {
		h.fresh = o.n + 1
	}
	return d, 0, goOn
}

// beforeAttempt starts the attempt after an unapplied change without a
// checkpoint.
func (h *verifyHook) beforeAttempt(s *attemptStart) (int, action) {
	if s.n == h.fresh && !s.given {
		s.ckpt, s.given = "", true
	}
	return 0, goOn
}

// decided arms the check of the next attempt: the knobs the relaunch
// changed, or after a relaunch without the checkpoint, the changes that
// did not take hold.
func (h *verifyHook) decided(o *outcome, d policy.Decision, _ string) {
	if d.Verb != policy.Relaunch {
		return
	}
	var want []verifyWant
	if d.FromScratch {
		for _, u := range h.unapplied {
			want = append(want, verifyWant{knob: u.Knob, set: u.Set, old: u.Used})
		}
	}
	for _, c := range d.Changes {
		if c.Knob == "" {
			continue
		}
		v, ok := d.State.Values[c.Knob]
		if !ok {
			continue
		}
		want = append(want, verifyWant{knob: c.Knob, set: v.String(), old: c.Old})
	}
	h.attempt, h.want, h.reader, h.seen = o.n+1, want, nil, map[string]verifySeen{}
	if len(want) == 0 {
		return
	}
	keys := make([]settings.Key, len(want))
	for i, w := range want {
		keys[i] = settings.Key{Knob: w.knob, Spellings: h.l.pol.KeySpellings(w.knob)}
	}
	h.reader = settings.New(keys)
}

package explain

import (
	"bytes"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// A console log is what a terminal, or a batch system's output file
// (`#SBATCH -o train-%j.out`), kept of `gpuguard run`: the job's output and
// gpuguard's own lines ("gpuguard: ...", on stderr) interleaved. gpuguard's
// lines mark where each attempt begins, how it ended, and what the policy
// made of it; explain reads such a log attempt by attempt, like the run
// directory it came from, and classifies each attempt's part with
// gpuguard's lines taken out, which leaves what the run directory's
// output.log holds of it.
//
// The lines it reads (internal/supervisor writes them):
//
//	gpuguard: run directory DIR                      the run began
//	gpuguard: attempt N: ARGV                        attempt N (N > 1, or a resumed run's first) begins
//	gpuguard: attempt N ...                          any other line about attempt N: it has begun
//	gpuguard: the job exited with status S           how the current attempt ended
//	gpuguard: the job was killed by SIG (exit status S)
//	gpuguard: attempt N died of NOUN ...             the verdict the policy acted on
//	gpuguard:   attempt  ended  ...                  the final table, one row per attempt:
//	gpuguard:   N        KIND (exit S)  ...          its verdict and exit status
//
// The job's own phase markers ("gpuguard: phase=val") are the job's output.

// consoleMaxLine bounds a line kept whole while looking for gpuguard's
// lines: a longer one (a progress bar redrawn with '\r' for megabytes) is
// the job's, and goes to its attempt in pieces.
const consoleMaxLine = 64 << 10

// consoleAttempt is one attempt's part of a console log.
type consoleAttempt struct {
	n      int
	c      *classify.Classifier
	split  *lines.Splitter // the job's bytes, numbered from the attempt's first line as output.log's part is
	bytes  int64
	exit   *classify.Exit
	live   classify.Kind // the verdict gpuguard gave (decision line or table), "" when none
	tabled bool          // the final table had a row for it
}

// consoleLog reads a log (it is an io.Writer: write the whole log to it) and
// splits it at gpuguard's lines. It is a console log when it held at least
// one of them that marks the run or an attempt.
type consoleLog struct {
	buf      []byte // the line being read
	long     bool   // buf is the tail of a line longer than consoleMaxLine
	attempts []*consoleAttempt
	run      int // where the current run's attempts begin in attempts (a log may hold several runs)
	cur      *consoleAttempt
	marked   bool // a line that marks the run or an attempt was seen
	inTable  bool
	detect   bool // only find out whether it is a console log: classify nothing
	err      error
}

func (l *consoleLog) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			if len(l.buf) > consoleMaxLine {
				l.job(l.buf)
				l.buf, l.long = l.buf[:0], true
			}
			break
		}
		l.buf = append(l.buf, p[:i+1]...)
		p = p[i+1:]
		if l.long {
			l.job(l.buf)
		} else {
			l.line(l.buf)
		}
		l.buf, l.long = l.buf[:0], false
	}
	return n, l.err
}

// flush ends the log: a last line without a newline is the job's.
func (l *consoleLog) flush() {
	if len(l.buf) > 0 {
		l.job(l.buf)
		l.buf = l.buf[:0]
	}
	for _, a := range l.attempts {
		a.split.Flush()
	}
}

// attempt returns the current run's attempt n, starting it when it is new.
func (l *consoleLog) attempt(n int) *consoleAttempt {
	for _, a := range l.attempts[l.run:] {
		if a.n == n {
			return a
		}
	}
	c, err := classify.NewClassifier(classify.ClassifierOptions{})
	if err != nil {
		l.err = err
		c, _ = classify.NewClassifier(classify.ClassifierOptions{})
	}
	a := &consoleAttempt{n: n, c: c, split: lines.New(lines.DefaultMax, c.Line)}
	l.attempts = append(l.attempts, a)
	return a
}

// job gives raw bytes of the job's output to the current attempt (the
// first, until a line says otherwise).
func (l *consoleLog) job(b []byte) {
	if l.cur == nil {
		l.cur = l.attempt(1)
	}
	l.cur.bytes += int64(len(b))
	if !l.detect {
		l.cur.split.Write(b)
	}
}

var (
	statusPrefix = []byte("gpuguard: ")
	phaseMarker  = []byte("gpuguard: phase=")
	tableHeader  = []byte("gpuguard:   attempt  ended")
)

// line reads one whole line (with its '\n').
func (l *consoleLog) line(raw []byte) {
	t := bytes.TrimRight(raw, "\r\n")
	if !bytes.HasPrefix(t, statusPrefix) || bytes.HasPrefix(t, phaseMarker) {
		l.inTable = false
		l.job(raw)
		return
	}
	rest := string(t[len(statusPrefix):])
	if bytes.HasPrefix(t, tableHeader) {
		l.marked, l.inTable = true, true
		return
	}
	if l.inTable {
		if n, kind, code, ok := tableRow(rest); ok {
			// A resumed run's table lists the attempts of the run it
			// resumed too: the latest attempt n, whichever run it was in.
			var a *consoleAttempt
			for i := len(l.attempts) - 1; i >= 0 && a == nil; i-- {
				if l.attempts[i].n == n {
					a = l.attempts[i]
				}
			}
			if a == nil {
				a = l.attempt(n)
			}
			a.tabled = true
			if kind != "" {
				a.live = kind
			}
			if a.exit == nil && code >= 0 {
				a.exit = &classify.Exit{Code: code}
			}
			return
		}
		l.inTable = false
	}
	var n int
	var tail string
	switch {
	case scan(rest, "run directory ", nil, &tail):
		// Another run appended to the same log (a requeued batch job,
		// `>>`): its attempts are counted apart.
		l.marked = true
		if l.cur != nil {
			l.run, l.cur = len(l.attempts), nil
		}
	case scan(rest, "attempt ", &n, &tail):
		l.marked = true
		if l.cur == nil || n > l.cur.n {
			l.cur = l.attempt(n)
		}
		if after, ok := cutPrefix(tail, " died of "); ok && n == l.cur.n {
			if k := kindOfNoun(after); k != "" {
				l.cur.live = k
			}
		}
	case scan(rest, "the job exited with status ", &n, &tail):
		if l.cur != nil {
			l.cur.exit = &classify.Exit{Code: n}
		}
	case scan(rest, "the job was killed by ", nil, &tail):
		if l.cur != nil {
			var sig string
			var code int
			if _, err := fmt.Sscanf(tail, "%s (exit status %d)", &sig, &code); err == nil {
				l.cur.exit = &classify.Exit{Code: code, Signal: unix.SignalNum(sig)}
			}
		}
	}
}

// scan reads "PREFIX[N]TAIL" from s: with n, a number must follow prefix.
func scan(s, prefix string, n *int, tail *string) bool {
	rest, ok := cutPrefix(s, prefix)
	if !ok {
		return false
	}
	if n != nil {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		v, err := strconv.Atoi(rest[:i])
		if err != nil {
			return false
		}
		*n, rest = v, rest[i:]
	}
	*tail = rest
	return true
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return s, false
	}
	return s[len(prefix):], true
}

// tableRow reads a row of the final table, "  2        gpu_oom (exit 1)  train ...":
// the attempt, the kind of its verdict ("" for ok, interrupted, stopped, failed)
// and its exit status (-1 when not shown; 0 for ok).
func tableRow(s string) (n int, kind classify.Kind, code int, ok bool) {
	var ended string
	if _, err := fmt.Sscanf(s, "%d %s", &n, &ended); err != nil || n < 1 {
		return 0, "", 0, false
	}
	code = -1
	if ended == "ok" {
		code = 0
	}
	switch k := classify.Kind(ended); k {
	case classify.KindGPUOOM, classify.KindCPUAllocOOM, classify.KindHostOOM, classify.KindCrash, classify.KindHang:
		kind = k
	}
	var c int
	if i := bytes.Index([]byte(s), []byte("(exit ")); i >= 0 {
		if _, err := fmt.Sscanf(s[i:], "(exit %d)", &c); err == nil {
			code = c
		}
	}
	return n, kind, code, true
}

// kindOfNoun reads the kind from a decision line's "died of NOUN ...".
func kindOfNoun(s string) classify.Kind {
	for _, k := range []classify.Kind{classify.KindGPUOOM, classify.KindCPUAllocOOM, classify.KindHostOOM, classify.KindCrash, classify.KindHang} {
		if noun := k.Noun(); len(s) >= len(noun) && s[:len(noun)] == noun {
			return k
		}
	}
	return ""
}

// results are the attempts' verdicts, each read as its run directory's
// explain reads it: the output, then how the attempt ended, and the
// verdict gpuguard gave where the output alone reads otherwise. An attempt
// of which the log holds nothing of the job's and nothing of its end (the
// lines before a resumed run's first attempt) is left out.
func (l *consoleLog) results(file string) []result {
	var out []result
	for i, a := range l.attempts {
		if a.bytes == 0 && a.exit == nil && a.live == "" && !a.tabled && len(l.attempts) > i+1 {
			continue
		}
		if a.live == classify.KindHang {
			// gpuguard stopped it: a hang has no words of its own.
			if a.exit == nil {
				a.exit = &classify.Exit{}
			}
			a.exit.StoppedByUs = true
		}
		switch {
		case a.exit != nil:
			a.c.Exit(*a.exit)
		case i+1 < len(l.attempts) || a.tabled:
			// It ended (another began, or the table lists it), and
			// gpuguard says the status only when it is not 0.
			a.c.Exit(classify.Exit{})
		}
		v := a.c.Verdict()
		if a.live != "" && a.live != v.Kind {
			note := fmt.Sprintf("(The output alone reads as %s; this is the verdict gpuguard gave when the attempt ended, which the policy acted on.)", v.Kind)
			v.Kind = a.live
			if v.Diagnosis == "" {
				v.Diagnosis = note
			} else {
				v.Diagnosis += " " + note
			}
		}
		out = append(out, result{File: file, Attempt: a.n, Verdict: v})
	}
	return out
}

// Package explain implements `gpuguard explain`: the classifier's verdict on
// finished logs, in plain words or as JSON.
//
// It reads each log named on the command line ("-" is standard input),
// whether or not it was written under gpuguard, gzip-compressed or not (a
// gpuguard run directory, or its output.log, is read attempt by attempt), and
// prints what happened (out-of-memory kind, or a crash that is not memory),
// where (line, phase, rank, step), the figures the message printed in GiB,
// and what to change. The classification is classify.ClassifyReader's; this
// package only renders it.
package explain

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Options are the inputs of `gpuguard explain`.
type Options struct {
	Paths  []string // log files; "-" is stdin
	JSON   bool
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Command runs `gpuguard explain`. It returns nil when every log could be
// read, even when a log shows a failure; an error with exit status NoInput
// (package exitcode) when a log is missing or unreadable (the others are
// still explained, and the message on stderr names the file); an error with
// status DataErr when a log is empty or is not text (an executable, an
// image), which the classifier would find nothing in, or worse, something;
// the first failing log's status when several fail; an error with status
// IOErr, saying so, when stdout cannot be written.
func Command(o Options) error {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	out := bufio.NewWriter(o.Stdout)
	var status error
	stdinUsed := false
	first := true
	for _, path := range o.Paths {
		results, err := explainPath(path, o.Stdin, &stdinUsed)
		if err != nil {
			fmt.Fprintf(o.Stderr, "gpuguard explain: %v\n", err)
			if status == nil {
				code := exitcode.NoInput
				var coded *exitcode.Error
				if errors.As(err, &coded) {
					code = coded.Code
				}
				status = exitcode.Status(code)
			}
			continue
		}
		for _, r := range results {
			if o.JSON {
				err = writeJSON(out, r)
			} else {
				if !first {
					out.WriteString("\n")
				}
				err = writeText(out, r)
			}
			first = false
			if err == nil {
				err = out.Flush()
			}
			if err != nil {
				return &exitcode.Error{Code: exitcode.IOErr, Err: err,
					Msg: fmt.Sprintf("writing the result for %s: %v", displayName(path), err)}
			}
		}
	}
	return status
}

// result is the verdict on one log, or on one attempt's part of a run
// directory's output.log (Attempt > 0).
type result struct {
	File    string
	Attempt int
	Verdict classify.Verdict
	// Site is where the torch probe (gpuguard run --probe torch) saw the
	// attempt's out-of-memory error raised; nil without the probe.
	Site *record.ProbeSite
}

// explainPath explains a log file, or a gpuguard run directory (or the
// output.log inside one) attempt by attempt: every attempt_start event in
// its events.jsonl says where that attempt's output begins in output.log.
// A run written before gpuguard recorded those offsets is explained whole.
func explainPath(path string, stdin io.Reader, stdinUsed *bool) ([]result, error) {
	allowEmpty := false
	if path != "-" {
		dir := ""
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			dir = path
		} else if filepath.Base(path) == record.OutputLog {
			dir = filepath.Dir(path)
		}
		if dir != "" {
			attempts, err := runAttempts(dir)
			if err != nil {
				return nil, err
			}
			if len(attempts) > 0 {
				return explainRun(dir, attempts)
			}
			path = filepath.Join(dir, record.OutputLog)
			// A job that printed nothing leaves an empty output.log.
			allowEmpty = true
		}
	}
	return explainOne(path, stdin, stdinUsed, allowEmpty)
}

// attemptSpan is where one attempt's output lies in output.log, and how
// the attempt ended.
type attemptSpan struct {
	attempt int
	offset  int64
	site    *record.ProbeSite  // from its attempt_end
	end     *record.AttemptEnd // nil when the journal holds no end (the attempt was still running)
}

// runAttempts reads the attempts' output offsets from dir's events.jsonl. It
// returns none for a directory without events.jsonl next to output.log
// (not a run directory) or whose attempts carry no offsets; lines that are
// not JSON are skipped (the journal may end in a torn write).
func runAttempts(dir string) ([]attemptSpan, error) {
	f, err := os.Open(filepath.Join(dir, record.Events))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, lerr := os.Stat(filepath.Join(dir, record.OutputLog)); lerr != nil {
				return nil, fmt.Errorf("cannot read %s: it is a directory but not a gpuguard run directory (no %s); name a log file", dir, record.OutputLog)
			}
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read the run's journal %s: %w", filepath.Join(dir, record.Events), unwrapPath(err))
	}
	defer f.Close()
	entries, _, err := record.Read(f)
	if err != nil {
		return nil, fmt.Errorf("cannot read the run's journal %s: %w", filepath.Join(dir, record.Events), err)
	}
	var spans []attemptSpan
	sites := map[int]*record.ProbeSite{}
	ends := map[int]*record.AttemptEnd{}
	for _, e := range entries {
		ev, _ := e.Event()
		switch ev := ev.(type) {
		case record.AttemptStart:
			if ev.LogOffset == nil {
				return nil, nil // written by a gpuguard that did not record offsets
			}
			spans = append(spans, attemptSpan{attempt: ev.Attempt, offset: *ev.LogOffset})
		case record.AttemptEnd:
			if ev.Site != nil {
				sites[ev.Attempt] = ev.Site
			}
			end := ev
			ends[ev.Attempt] = &end
		}
	}
	for i := range spans {
		spans[i].site = sites[spans[i].attempt]
		spans[i].end = ends[spans[i].attempt]
	}
	return spans, nil
}

// explainRun classifies each attempt's part of dir's output.log on its own,
// so that a failure the next attempt recovered from is that attempt's
// verdict, not an earlier failure "the job survived".
func explainRun(dir string, spans []attemptSpan) ([]result, error) {
	logPath := filepath.Join(dir, record.OutputLog)
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("cannot read the log %s: %w", logPath, unwrapPath(err))
	}
	defer f.Close()
	out := make([]result, 0, len(spans))
	for i, s := range spans {
		var r io.Reader = io.NewSectionReader(f, s.offset, 1<<62)
		if i+1 < len(spans) {
			r = io.NewSectionReader(f, s.offset, max(spans[i+1].offset-s.offset, 0))
		}
		v, err := attemptVerdict(r, s.end)
		if err != nil {
			return nil, fmt.Errorf("cannot read the log %s: %w", logPath, unwrapPath(err))
		}
		out = append(out, result{File: logPath, Attempt: s.attempt, Verdict: v, Site: s.site})
	}
	return out, nil
}

// attemptVerdict classifies one attempt's output with the run's own
// evidence of how it ended, as the live classifier did: the exit status or
// signal, whether gpuguard stopped it, and the memory cgroup's OOM kills
// recorded with the live verdict at the attempt's end. A job the kernel
// killed in its cgroup printed nothing about it; its output alone says "no
// failure", its end says host_oom.
//
// It never contradicts the live verdict: when the two disagree on the kind
// (the live classifier dropped output it could not keep up with, or the
// supervisor stopped a hung job, which no output shows), the live verdict is
// the one reported, since it is the one the policy acted on, and the
// diagnosis says so.
func attemptVerdict(r io.Reader, end *record.AttemptEnd) (classify.Verdict, error) {
	c, err := classify.NewClassifier(classify.ClassifierOptions{})
	if err != nil {
		return classify.Verdict{}, err
	}
	s := lines.New(lines.DefaultMax, c.Line)
	_, err = io.Copy(s, r)
	s.Flush()
	if err != nil {
		return classify.Verdict{}, err
	}
	if end == nil {
		return c.Verdict(), nil
	}
	e := classify.Exit{Code: end.ExitCode, StoppedByUs: end.StoppedByUs}
	if end.Signal != "" {
		e.Signal = unix.SignalNum(end.Signal)
	}
	if end.Verdict != nil {
		e.CgroupOOMKills = end.Verdict.CgroupOOMKills
	}
	c.Exit(e)
	v := c.Verdict()
	if live := end.Verdict; live != nil && live.Kind != "" && live.Kind != v.Kind {
		lv := *live
		note := fmt.Sprintf("(The output alone reads as %s; this is the verdict gpuguard gave when the attempt ended, which the policy acted on.)", v.Kind)
		if lv.Diagnosis == "" {
			lv.Diagnosis = note
		} else {
			lv.Diagnosis += " " + note
		}
		return lv, nil
	}
	return v, nil
}

func displayName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// explainOne classifies one log: whole, or attempt by attempt when it is
// a console log of `gpuguard run` (console.go). Its errors name the log and
// say what to do.
func explainOne(path string, stdin io.Reader, stdinUsed *bool, allowEmpty bool) ([]result, error) {
	src, closeLog, err := openLog(path, stdin, stdinUsed, allowEmpty)
	if err != nil {
		return nil, err
	}
	defer closeLog()
	// Standard input is read once: split it as it is classified. A file
	// is only looked through for gpuguard's lines, and read again when it
	// has them, so that a plain log costs one classification.
	cl := &consoleLog{detect: path != "-"}
	v, err := classify.ClassifyReader(io.TeeReader(src, cl), classify.ClassifierOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read the log %s: %w", displayName(path), unwrapPath(err))
	}
	cl.flush()
	if !cl.marked {
		return []result{{File: path, Verdict: v}}, nil
	}
	if cl.detect {
		src2, close2, err := openLog(path, stdin, stdinUsed, allowEmpty)
		if err != nil {
			return nil, err
		}
		defer close2()
		cl = &consoleLog{}
		if _, err := io.Copy(cl, src2); err != nil {
			return nil, fmt.Errorf("cannot read the log %s: %w", displayName(path), unwrapPath(err))
		}
		cl.flush()
	}
	return cl.results(path), nil
}

// openLog opens a log for explainOne: decompressed when it is gzip, and
// checked to be text.
func openLog(path string, stdin io.Reader, stdinUsed *bool, allowEmpty bool) (io.Reader, func(), error) {
	var r io.Reader
	closers := []func() error{}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if path == "-" {
		if stdin == nil {
			return nil, nil, errors.New("no standard input to read the log \"-\" from")
		}
		if *stdinUsed {
			return nil, nil, errors.New(`"-" (standard input) is named more than once; it can be read only once`)
		}
		*stdinUsed = true
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read the log %s: %w", path, unwrapPath(err))
		}
		closers = append(closers, f.Close)
		if st, err := f.Stat(); err == nil && st.IsDir() {
			closeAll()
			return nil, nil, fmt.Errorf("cannot read the log %s: it is a directory; name the log file inside it", path)
		}
		r = f
	}
	br := bufio.NewReaderSize(r, 64<<10)
	src := io.Reader(br)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("cannot read the log %s: it looks gzip-compressed but is not valid gzip: %w", displayName(path), err)
		}
		closers = append(closers, zr.Close)
		src = zr
	}
	tb := bufio.NewReaderSize(src, 64<<10)
	head, _ := tb.Peek(8 << 10)
	if len(head) == 0 && !allowEmpty {
		closeAll()
		return nil, nil, &exitcode.Error{Code: exitcode.DataErr,
			Msg: fmt.Sprintf("cannot explain %s: it is empty; name the log of a job that printed something", displayName(path))}
	}
	if what := notText(head); what != "" {
		closeAll()
		return nil, nil, &exitcode.Error{Code: exitcode.DataErr,
			Msg: fmt.Sprintf("cannot explain %s: it is %s, not a text log; name the file the job's output went to, or a gpuguard run directory", displayName(path), what)}
	}
	return tb, closeAll, nil
}

// notText says what head, the start of a file, is when it is not text: a
// known binary format by its magic number, or binary data (a NUL byte,
// which no log holds). It is "" for text.
func notText(head []byte) string {
	for _, m := range []struct{ magic, what string }{
		{"\x7fELF", "an executable (ELF)"},
		{"\x89PNG\r\n\x1a\n", "a PNG image"},
		{"\xff\xd8\xff", "a JPEG image"},
		{"GIF8", "a GIF image"},
		{"%PDF-", "a PDF document"},
		{"PK\x03\x04", "a zip archive (a PyTorch checkpoint is one)"},
		{"\x80\x02", "a Python pickle"},
	} {
		if strings.HasPrefix(string(head), m.magic) {
			return m.what
		}
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return "binary data"
	}
	return ""
}

// unwrapPath drops the *PathError wrapper, whose message repeats the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// jsonVerdict is the --json object: the Verdict with the file it is about,
// the phase as null when none, and empty lists as [] rather than null.
type jsonVerdict struct {
	File    string `json:"file"`
	Attempt int    `json:"attempt,omitempty"` // in a run directory: the attempt, from 1
	classify.Verdict
	Phase       *classify.Phase      `json:"phase"`
	Phases      []classify.PhaseMark `json:"phases"`
	Suggestions []string             `json:"suggestions"`
	// Site: where the torch probe saw the OOM raised (run directories of
	// runs with --probe torch only).
	Site *record.ProbeSite `json:"site,omitempty"`
}

func writeJSON(w io.Writer, r result) error {
	v := r.Verdict
	j := jsonVerdict{File: r.File, Attempt: r.Attempt, Verdict: v, Phases: v.Phases, Suggestions: v.Suggestions, Site: r.Site}
	if v.Phase != classify.PhaseNone {
		p := v.Phase
		j.Phase = &p
	}
	if j.Phases == nil {
		j.Phases = []classify.PhaseMark{}
	}
	if j.Suggestions == nil {
		j.Suggestions = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(j)
}

const wrapWidth = 100

// writeText renders a verdict for a person.
func writeText(w *bufio.Writer, r result) error {
	v := r.Verdict
	name := displayName(r.File)
	if r.Attempt > 0 {
		name += fmt.Sprintf(", attempt %d", r.Attempt)
	}
	fmt.Fprintf(w, "%s: %s (%s)\n", name, v.Kind.Title(), v.Kind)
	field := func(name, value string) {
		if value == "" {
			return
		}
		lines := wrap(value, wrapWidth-12)
		for i, l := range lines {
			if i == 0 {
				fmt.Fprintf(w, "  %-10s%s\n", name, l)
			} else {
				fmt.Fprintf(w, "  %-10s%s\n", "", l)
			}
		}
	}
	if v.Kind != classify.KindNone {
		field("cause", v.Reason)
	}
	field("where", whereText(v))
	field("site", r.Site.Describe())
	if v.Text != "" {
		field("line", clip(v.Text, 240))
	}
	for i, m := range memoryText(v) {
		if i == 0 {
			field("memory", m)
		} else {
			field("", m)
		}
	}
	field("phases", phasesText(v.Phases))
	field("diagnosis", v.Diagnosis)
	if len(v.Suggestions) > 0 {
		fmt.Fprintf(w, "  %s\n", "what to change:")
		for _, s := range v.Suggestions {
			for i, l := range wrap(s, wrapWidth-8) {
				if i == 0 {
					fmt.Fprintf(w, "    - %s\n", l)
				} else {
					fmt.Fprintf(w, "      %s\n", l)
				}
			}
		}
	}
	return nil
}

func whereText(v classify.Verdict) string {
	var parts []string
	if v.Line > 0 {
		parts = append(parts, fmt.Sprintf("line %d", v.Line))
	}
	phase := "none"
	if v.Phase != classify.PhaseNone {
		phase = string(v.Phase)
	}
	parts = append(parts, "phase "+phase)
	if v.Rank != nil {
		parts = append(parts, fmt.Sprintf("rank %d", *v.Rank))
	}
	if v.Host != "" {
		parts = append(parts, "host "+v.Host)
	}
	if v.Requester == classify.RequesterDataLoaderWorker {
		parts = append(parts, "in a DataLoader worker")
	}
	if v.Step != nil {
		parts = append(parts, fmt.Sprintf("step %d", *v.Step))
	}
	if v.Epoch != nil {
		parts = append(parts, fmt.Sprintf("epoch %d", *v.Epoch))
	}
	return strings.Join(parts, ", ")
}

func memoryText(v classify.Verdict) []string {
	o := v.OOM
	if o == nil {
		return nil
	}
	var out []string
	var first []string
	if o.RequestedBytes != nil {
		first = append(first, "requested "+humanize.Size(*o.RequestedBytes))
	}
	if o.Device != nil {
		first = append(first, "on "+*o.Device)
	}
	if len(first) > 0 {
		out = append(out, strings.Join(first, " "))
	}
	var dev []string
	if o.TotalBytes != nil {
		dev = append(dev, humanize.Size(*o.TotalBytes)+" total")
	}
	if o.FreeBytes != nil {
		dev = append(dev, humanize.Size(*o.FreeBytes)+" free")
	}
	if len(dev) > 0 {
		out = append(out, "device: "+strings.Join(dev, ", "))
	}
	var held []string
	if o.InUseBytes != nil {
		held = append(held, "this process "+humanize.Size(*o.InUseBytes)+" in use")
	}
	if o.AllocatedBytes != nil {
		held = append(held, humanize.Size(*o.AllocatedBytes)+" allocated")
	}
	if o.ReservedUnallocatedBytes != nil {
		held = append(held, humanize.Size(*o.ReservedUnallocatedBytes)+" reserved but unallocated")
	}
	if o.ReservedTotalBytes != nil {
		held = append(held, humanize.Size(*o.ReservedTotalBytes)+" reserved in total")
	}
	if len(held) > 0 {
		out = append(out, "held: "+strings.Join(held, ", "))
	}
	for _, p := range o.OtherProcesses {
		out = append(out, fmt.Sprintf("other process %d: %s", p.PID, humanize.Size(p.Bytes)))
	}
	if o.RequestedBytes != nil && o.ReservedUnallocatedBytes != nil {
		yes := "no"
		if v.Fragmentation {
			yes = "yes"
		}
		out = append(out, "fragmentation: "+yes)
	}
	return out
}

func phasesText(ms []classify.PhaseMark) string {
	if len(ms) == 0 {
		return ""
	}
	const show = 6
	var parts []string
	for i, m := range ms {
		if len(ms) > show && i == show/2 {
			parts = append(parts, fmt.Sprintf("... (%d more)", len(ms)-show))
		}
		if len(ms) > show && i >= show/2 && i < len(ms)-show/2 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s from line %d", m.Phase, m.Line))
	}
	return strings.Join(parts, ", ")
}

// clip shortens s to at most n bytes (at a character boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// wrap breaks s into lines of at most width bytes at spaces (a longer word
// gets a line of its own).
func wrap(s string, width int) []string {
	words := strings.Fields(s)
	if len(words) == 0 {
		return nil
	}
	var out []string
	cur := words[0]
	for _, wd := range words[1:] {
		if len(cur)+1+len(wd) > width {
			out = append(out, cur)
			cur = wd
			continue
		}
		cur += " " + wd
	}
	return append(out, cur)
}

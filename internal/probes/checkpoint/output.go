package checkpoint

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
)

// What a job's output says about its checkpoints, as evidence for the
// resume choice: that it printed a save and went on (so the save was done
// when it printed the next thing), and that it died while loading the
// checkpoint it was given (a traceback whose frames load one), so that the
// next attempt falls back to the one before.

// Output reads one attempt's output lines, in order. Not safe for
// concurrent use.
type Output struct {
	wd    string
	saves []savedAt
	// waiting: saves not yet followed by other output.
	waiting int
	// The traceback being read: its frames so far; inTB while one is open.
	inTB   bool
	frames []frame
	// load: the last traceback was raised while loading a checkpoint, and
	// no output since shows the job went on.
	load    *LoadFailure
	pending bool // a frame's code line comes next
	// chained: the last traceback loaded a checkpoint, and Python said
	// another exception followed from it ("During handling of the above
	// exception", "The above exception was the direct cause").
	chained *LoadFailure
}

type savedAt struct {
	path   string // absolute, clean
	line   string // the save line
	wentOn string // the first line after it that is not about saving ("" none yet)
}

type frame struct {
	file, fn, code string
}

// LoadFailure is a traceback raised while a checkpoint was being loaded.
type LoadFailure struct {
	// Exception is the traceback's last line ("_pickle.UnpicklingError:
	// invalid load key, '\x00'.").
	Exception string
	// Frame is the frame that loads, in words ("torch.load in train.py,
	// line 12"); "" when only the exception names a load.
	Frame string
}

// String says where and what, for messages.
func (f LoadFailure) String() string {
	if f.Frame == "" {
		return f.Exception
	}
	return f.Exception + " (in " + f.Frame + ")"
}

// NewOutput reads output of a job running in wd (save lines' relative
// paths are relative to it).
func NewOutput(wd string) *Output { return &Output{wd: wd} }

var (
	rankPrefixRE = regexp.MustCompile(`^\[(?:rank|default)\d*\]:\s?`)
	frameRE      = regexp.MustCompile(`^\s*File "([^"]+)", line \d+, in (\S+)`)
	exceptionRE  = regexp.MustCompile(`^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s?(.*))?$`)
	// loadCallRE: a frame's code line that loads a checkpoint.
	loadCallRE = regexp.MustCompile(`\b(torch\.load|load_state_dict|load_from_checkpoint|load_checkpoint|safe_open|load_file|safetensors\.torch\.load|_load_from_checkpoint|resume_from_checkpoint)\s*\(`)
	// loadFuncRE: a frame's function that loads one.
	loadFuncRE = regexp.MustCompile(`^(load_state_dict|_load_from_checkpoint|load_checkpoint|_load_checkpoint|load_from_checkpoint|_load_rng_state|load_file|safe_open|_legacy_load|_load|load)$`)
	// loadErrorRE: exceptions that only a load raises.
	loadErrorRE = regexp.MustCompile(`UnpicklingError|PytorchStreamReader failed|failed finding central directory|SafetensorError|HeaderTooLarge|Error\(s\) in loading state_dict|invalid load key|Ran out of input|unexpected EOF|file is not a zip|BadZipFile`)
	// memoryErrorRE: a load that ran out of memory is an OOM, not a bad
	// checkpoint.
	memoryErrorRE = regexp.MustCompile(`OutOfMemoryError|MemoryError|out of memory|KeyboardInterrupt|SystemExit`)
	// wentOnRE: a line that shows training went on (a step, an epoch, an
	// iteration with a number).
	wentOnRE = regexp.MustCompile(`(?i)\b(step|iter(ation)?|epoch|batch)\b\s*[:=#]?\s*\[?\d+`)
)

// Line reads the next line of output (either stream, in the order seen).
func (o *Output) Line(text []byte) {
	if len(text) > 4096 {
		text = text[:4096]
	}
	t := bytes.TrimRight(text, "\r")
	if len(t) > 0 && t[0] == '[' {
		t = rankPrefixRE.ReplaceAll(t, nil)
	}
	// The common line (a step, a progress bar) needs none of the checks
	// below but the save's: a fast path without allocating.
	if !o.inTB && o.load == nil && o.waiting == 0 && !bytes.HasPrefix(t, tracebackStart) && !bytes.HasPrefix(t, []byte("During ")) && !bytes.HasPrefix(t, []byte("The above")) {
		if _, ok := SavedPath(t); !ok {
			return
		}
	}
	s := string(t)
	if o.tracebackLine(s) {
		return
	}
	if strings.HasPrefix(s, "During handling of the above exception") || strings.HasPrefix(s, "The above exception was the direct cause") {
		o.chained = o.load
		return
	}
	if o.load != nil && wentOnRE.MatchString(s) {
		o.load = nil // the job went on after it: it did not die loading
	}
	if p, ok := SavedPath(t); ok {
		if !filepath.IsAbs(p) {
			p = filepath.Join(o.wd, p)
		}
		p = filepath.Clean(p)
		for i := range o.saves { // the save of another one: the earlier saves were over
			if o.saves[i].wentOn == "" && o.saves[i].path != p {
				o.wentOn(i, s)
			}
		}
		o.saves = append(o.saves, savedAt{path: p, line: strings.TrimSpace(s)})
		o.waiting++
		if len(o.saves) > maxSaves { // keep the latest
			if o.saves[0].wentOn == "" {
				o.waiting--
			}
			o.saves = o.saves[1:]
		}
		return
	}
	if o.waiting == 0 || strings.TrimSpace(s) == "" || SavingLine(t) || bytes.Contains(bytes.ToLower(t), []byte("saved")) {
		return
	}
	for i := range o.saves {
		if o.saves[i].wentOn == "" {
			o.wentOn(i, s)
		}
	}
}

// maxSaves bounds the save lines remembered (a long run saves thousands).
const maxSaves = 256

var tracebackStart = []byte("Traceback (most recent call last):")

func (o *Output) wentOn(i int, s string) {
	o.saves[i].wentOn = strings.TrimSpace(s)
	o.waiting--
}

// tracebackLine reads s as part of a Python traceback, and reports whether
// it was one.
func (o *Output) tracebackLine(s string) bool {
	switch {
	case strings.HasPrefix(s, string(tracebackStart)):
		o.inTB, o.frames, o.pending = true, o.frames[:0], false
		return true
	case !o.inTB:
		return false
	}
	if m := frameRE.FindStringSubmatch(s); m != nil {
		o.frames = append(o.frames, frame{file: m[1], fn: m[2]})
		o.pending = true
		return true
	}
	if o.pending && strings.HasPrefix(s, "    ") {
		o.frames[len(o.frames)-1].code = strings.TrimSpace(s)
		o.pending = false
		return true
	}
	if strings.HasPrefix(s, " ") || strings.TrimSpace(s) == "" {
		return true // ^^^^ markers, "...", locals
	}
	m := exceptionRE.FindStringSubmatch(s)
	if m == nil {
		return true // a chained message line ("During handling of ...")
	}
	o.inTB = false
	exc := strings.TrimSpace(s)
	chained := o.chained
	o.chained = nil
	if memoryErrorRE.MatchString(exc) {
		o.load = nil
		return true
	}
	where := o.loadingFrame()
	switch {
	case where != "" || loadErrorRE.MatchString(exc):
		o.load = &LoadFailure{Exception: exc, Frame: where}
	case chained != nil: // raised while handling a failed load
		o.load = &LoadFailure{Exception: exc, Frame: chained.Frame}
	default:
		o.load = nil
	}
	return true
}

// loadingFrame is the innermost frame of the user's code (or of a
// framework) that loads a checkpoint, in words, or "".
func (o *Output) loadingFrame() string {
	found := ""
	for _, f := range o.frames {
		base := filepath.Base(f.file)
		inTorch := strings.Contains(f.file, "torch/serialization.py") || strings.Contains(f.file, "safetensors")
		switch {
		case loadCallRE.MatchString(f.code):
			found = loadCallRE.FindStringSubmatch(f.code)[1] + " in " + base
		case loadFuncRE.MatchString(f.fn) && (inTorch || f.fn != "load" && f.fn != "_load"):
			if found == "" {
				found = f.fn + " in " + base
			}
		}
	}
	return found
}

// LoadFailed reports whether the output's last traceback was raised while
// a checkpoint was loaded, with nothing after it showing the job went on.
func (o *Output) LoadFailed() (LoadFailure, bool) {
	if o.load == nil {
		return LoadFailure{}, false
	}
	return *o.load, true
}

// SavedAndWentOn reports whether the job printed that it saved path (or a
// file inside it, or a directory holding it) and then
// printed something else that is not about saving: the save was over.
// It returns the two lines.
func (o *Output) SavedAndWentOn(path string) (save, next string, ok bool) {
	path = filepath.Clean(path)
	for i := len(o.saves) - 1; i >= 0; i-- {
		s := o.saves[i]
		if s.wentOn == "" {
			continue
		}
		sep := string(filepath.Separator)
		if s.path == path || strings.HasPrefix(s.path, path+sep) || strings.HasPrefix(path, s.path+sep) {
			return s.line, s.wentOn, true
		}
	}
	return "", "", false
}

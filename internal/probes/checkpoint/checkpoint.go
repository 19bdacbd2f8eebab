package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Spec says where a job writes its checkpoints and how to tell a
// complete one from one still being written. The policy file fills it in; the
// checkpoint watcher uses it.
type Spec struct {
	// Globs, relative to the job's working directory, match checkpoint files
	// or directories ("outputs/ckpt/step_*.pt", "out/checkpoint-*").
	Globs []string
	// Choose picks among complete checkpoints: "newest" (modification time,
	// the default) or "highest_step" (the largest number in the name).
	Choose string
	// Marker, for directory checkpoints, names a file whose presence marks
	// the directory complete (Hugging Face writes trainer_state.json last).
	Marker string
	// Quiet: a checkpoint without a marker, not seen renamed into place, is
	// complete once its size and modification time have not changed for this
	// long.
	Quiet time.Duration
	// Poll is the interval of the polling scan that backs up fsnotify (network
	// file systems deliver no events).
	Poll time.Duration
}

// Checkpoint discovery: where a job's checkpoints are, which of them are
// complete, and which one to resume from. See docs/checkpoints.md.
//
// Nothing here writes to the file system: checkpoints are only listed,
// stat'ed and (for a JSON marker) read.

const (
	// DefaultQuiet is Spec.Quiet when the spec leaves it 0.
	DefaultQuiet = 10 * time.Second
	// DefaultPoll is Spec.Poll when the spec leaves it 0.
	DefaultPoll = 10 * time.Second

	// ckptMaxTreeEntries bounds the walk of one directory checkpoint.
	ckptMaxTreeEntries = 100000
	// ckptMaxMarkerJSON: a JSON marker larger than this is trusted unread.
	ckptMaxMarkerJSON = 64 << 20
)

// ErrNoGlobs is returned (wrapped) for a Spec without
// globs: there is nothing to look for.
var ErrNoGlobs = errors.New("checkpoint spec has no globs: name where the job writes its checkpoints (checkpoints.globs in the policy)")

// Checkpoint is one checkpoint file or directory as a scan or the watcher
// found it.
type Checkpoint struct {
	// Path of the file or directory: the glob's match joined to the scan's
	// directory (absolute when that directory is). A symbolic link such as
	// Lightning's last.ckpt is resolved to its target, which is what Path
	// names; a dangling link is reported as itself, incomplete.
	Path string
	// Step is the step number in Path's base name (see StepOf); nil
	// when the name has none.
	Step *int64
	// ModTime: the file's modification time, or for a directory the newest
	// modification time of anything in its tree (the directory included).
	ModTime time.Time
	// Size in bytes: the file's, or the sum of the regular files in the tree.
	Size int64
	// Complete: safe to resume from. Never true for a checkpoint still being
	// written, as far as the rules can tell (see Why and docs/checkpoints.md).
	Complete bool
	// Settling: not complete only because it changed within the quiet
	// period. Once nothing can write it any more, it is complete if it had
	// stopped changing before its writer ended, or was moved into place
	// after it was written (see Resume.WritersGone).
	Settling bool
	// MovedAfterWrite: the file's status changed after its last write (its
	// ctime is later than its mtime): it was renamed into place, as atomic
	// writers do, or its mode was set, after its content was complete. A
	// file being written in place has the two equal: each write sets both.
	MovedAfterWrite bool
	// Structure: what the file's format says of its end (CheckStructure),
	// and why; StructureUnknown until Annotate has read it.
	Structure    Structure
	StructureWhy string
	// SavedWentOn: the job printed that it saved this checkpoint and then
	// printed something else (Output.SavedAndWentOn): the two lines, in
	// words; "" when it did not.
	SavedWentOn string
	// Why says which rule decided Complete, in words: "renamed into place",
	// "marker trainer_state.json present", "no change for 12s (quiet 10s)",
	// "last change 3s ago; ...", "empty file", ...
	Why string
}

// ckptRule is the rule that made a checkpoint complete.
type ckptRule uint8

const (
	ckptRuleNone ckptRule = iota
	ckptRuleRenamed
	ckptRuleMarker
	ckptRuleQuiet
)

// ckptPattern is one compiled glob.
type ckptPattern struct {
	glob string   // as the spec gave it
	full string   // the pattern to match paths against (dir joined, its metacharacters escaped)
	root string   // the directory before the first component with a metacharacter
	rest []string // the components after root; the last matches the checkpoint itself
}

// ckptSpec is a Spec checked and resolved against a directory.
type ckptSpec struct {
	dir      string
	patterns []ckptPattern
	highest  bool // choose by step number, not modification time
	marker   string
	quiet    time.Duration
	poll     time.Duration
}

func compileCkptSpec(dir string, spec Spec) (*ckptSpec, error) {
	if len(spec.Globs) == 0 {
		return nil, ErrNoGlobs
	}
	cs := &ckptSpec{dir: filepath.Clean(dir), marker: spec.Marker, quiet: spec.Quiet, poll: spec.Poll}
	switch spec.Choose {
	case "", "newest":
	case "highest_step":
		cs.highest = true
	default:
		return nil, fmt.Errorf("checkpoint choose %q: use newest (modification time, the default) or highest_step (number in the name)", spec.Choose)
	}
	if cs.quiet <= 0 {
		cs.quiet = DefaultQuiet
	}
	if cs.poll <= 0 {
		cs.poll = DefaultPoll
	}
	if m := spec.Marker; m != "" && (filepath.IsAbs(m) || m != filepath.Clean(m) || strings.HasPrefix(m, "..")) {
		return nil, fmt.Errorf("checkpoint marker %q: give a file name relative to the checkpoint directory, such as trainer_state.json", m)
	}
	for _, g := range spec.Globs {
		p, err := compileCkptPattern(cs.dir, g)
		if err != nil {
			return nil, err
		}
		cs.patterns = append(cs.patterns, p)
	}
	return cs, nil
}

const ckptGlobMeta = `*?[\`

func ckptEscapeGlob(s string) string {
	if !strings.ContainsAny(s, ckptGlobMeta) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(ckptGlobMeta, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func compileCkptPattern(dir, g string) (ckptPattern, error) {
	if strings.TrimSpace(g) == "" {
		return ckptPattern{}, fmt.Errorf("checkpoint glob %q is empty: give a pattern such as outputs/ckpt/step_*.pt", g)
	}
	clean := filepath.Clean(g)
	comps := strings.Split(clean, string(filepath.Separator))
	i := 0
	for i < len(comps)-1 && !strings.ContainsAny(comps[i], ckptGlobMeta) {
		i++
	}
	static := strings.Join(comps[:i], string(filepath.Separator))
	p := ckptPattern{glob: g, rest: comps[i:]}
	if filepath.IsAbs(clean) {
		p.full, p.root = clean, static
		if p.root == "" {
			p.root = string(filepath.Separator)
		}
	} else {
		p.full = filepath.Join(ckptEscapeGlob(dir), clean)
		p.root = filepath.Join(dir, static)
	}
	if _, err := filepath.Match(p.full, ""); err != nil {
		return ckptPattern{}, fmt.Errorf("checkpoint glob %q: %w (the syntax is Go's path/filepath.Match: * ? [a-z], no **)", g, err)
	}
	return p, nil
}

// matches reports whether path (cleaned) matches one of the globs.
func (cs *ckptSpec) matches(path string) bool {
	for _, p := range cs.patterns {
		if ok, _ := filepath.Match(p.full, path); ok {
			return true
		}
	}
	return false
}

// ckptFound is one glob match, a symbolic link resolved.
type ckptFound struct {
	path     string // the checkpoint: the match, or the link's final target
	via      string // the link that led to it, if any
	dangling bool   // path is a link whose target does not exist
}

// find lists the glob matches, links resolved, each path once.
func (cs *ckptSpec) find() []ckptFound {
	var out []ckptFound
	seen := map[string]bool{}
	for _, p := range cs.patterns {
		ms, _ := filepath.Glob(p.full) // the pattern was checked: no ErrBadPattern
		for _, m := range ms {
			f, ok := ckptResolve(m)
			if !ok || seen[f.path] {
				continue
			}
			seen[f.path] = true
			out = append(out, f)
		}
	}
	return out
}

// ckptResolve follows a chain of symbolic links from m, resolving each hop
// against the directory of the link (so the result keeps m's prefix, and a
// target also matched directly is recognised as the same checkpoint). ok is
// false when m no longer exists.
func ckptResolve(m string) (ckptFound, bool) {
	p := m
	for hop := 0; hop < 40; hop++ {
		fi, err := os.Lstat(p)
		if err != nil {
			if hop == 0 {
				return ckptFound{}, false
			}
			return ckptFound{path: m, dangling: true}, true
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			f := ckptFound{path: p}
			if hop > 0 {
				f.via = m
			}
			return f, true
		}
		t, err := os.Readlink(p)
		if err != nil {
			return ckptFound{path: m, dangling: true}, true
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = filepath.Clean(t)
	}
	return ckptFound{path: m, dangling: true}, true
}

// ckptObs is what the watcher knows beyond the file system.
type ckptObs struct {
	renamed   bool      // seen renamed into place (and not written since)
	lastEvent time.Time // last change the watcher saw (zero: none)
}

// evaluate decides whether one found checkpoint is complete at now.
func (cs *ckptSpec) evaluate(f ckptFound, now time.Time, obs ckptObs) (Checkpoint, ckptRule) {
	c := Checkpoint{Path: f.path}
	if n, ok := StepOf(filepath.Base(f.path)); ok {
		c.Step = &n
	}
	if f.dangling {
		t, _ := os.Readlink(f.path)
		c.Why = fmt.Sprintf("symbolic link to %s, which does not exist", t)
		return c, ckptRuleNone
	}
	prefix := ""
	if f.via != "" {
		prefix = "via " + filepath.Base(f.via) + ": "
	}
	why := func(s string) string { return prefix + s }

	fi, err := os.Stat(f.path)
	if err != nil {
		c.Why = why("cannot stat: " + err.Error())
		return c, ckptRuleNone
	}
	switch {
	case fi.IsDir():
		if cs.marker != "" {
			// The marker first: when it is done, the walk that follows sees
			// at least what it covers.
			ok, w := ckptMarkerDone(f.path, cs.marker)
			c.Size, c.ModTime, _ = ckptTreeStat(f.path, fi)
			c.Complete, c.Why = ok, why(w)
			if ok {
				return c, ckptRuleMarker
			}
			return c, ckptRuleNone
		}
		var files int
		c.Size, c.ModTime, files = ckptTreeStat(f.path, fi)
		if files == 0 {
			c.Why = why("directory holds no files")
			return c, ckptRuleNone
		}
	case fi.Mode().IsRegular():
		c.Size, c.ModTime = fi.Size(), fi.ModTime()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			c.MovedAfterWrite = time.Unix(st.Ctim.Unix()).After(c.ModTime)
		}
		if c.Size == 0 {
			c.Why = why("empty file")
			return c, ckptRuleNone
		}
	default:
		c.ModTime = fi.ModTime()
		c.Why = why("not a regular file or a directory")
		return c, ckptRuleNone
	}
	if obs.renamed {
		c.Complete, c.Why = true, why("renamed into place")
		return c, ckptRuleRenamed
	}
	last := c.ModTime
	if obs.lastEvent.After(last) {
		last = obs.lastEvent
	}
	age := now.Sub(last)
	switch {
	case age < 0:
		c.Why = why(fmt.Sprintf("modified %s in the future (clock skew?); complete after %s without changes", (-age).Round(time.Millisecond), cs.quiet))
	case age < cs.quiet:
		c.Settling = true
		c.Why = why(fmt.Sprintf("last change %s ago; complete after %s without changes", age.Round(time.Millisecond), cs.quiet))
	default:
		c.Complete = true
		c.Why = why(fmt.Sprintf("no change for %s (quiet %s)", age.Round(time.Millisecond), cs.quiet))
		return c, ckptRuleQuiet
	}
	return c, ckptRuleNone
}

// ckptTreeStat walks a directory checkpoint: total size of regular files,
// newest modification time (the root's included), number of regular files.
// Entries that vanish or cannot be read during the walk are skipped.
func ckptTreeStat(root string, rootInfo fs.FileInfo) (size int64, mod time.Time, files int) {
	mod = rootInfo.ModTime()
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		if n++; n > ckptMaxTreeEntries {
			return filepath.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if info.ModTime().After(mod) {
			mod = info.ModTime()
		}
		if info.Mode().IsRegular() {
			size += info.Size()
			files++
		}
		return nil
	})
	return size, mod, files
}

// ckptMarkerDone checks the marker file of a directory checkpoint. A marker
// whose name ends in .json must also hold complete JSON: frameworks write it
// in place, so it exists (empty or half written) before it is done.
func ckptMarkerDone(dir, marker string) (bool, string) {
	p := filepath.Join(dir, marker)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, "marker " + marker + " missing"
	case err != nil:
		return false, "marker " + marker + ": " + err.Error()
	case !fi.Mode().IsRegular():
		return false, "marker " + marker + " is not a regular file"
	}
	if strings.HasSuffix(strings.ToLower(marker), ".json") && fi.Size() <= ckptMaxMarkerJSON {
		b, err := os.ReadFile(p)
		if err != nil {
			return false, "marker " + marker + ": " + err.Error()
		}
		if len(b) == 0 || !json.Valid(b) {
			return false, "marker " + marker + " is not complete JSON yet"
		}
	}
	return true, "marker " + marker + " present"
}

var (
	ckptStepEq  = regexp.MustCompile(`step=(\d+)`)
	ckptDigits  = regexp.MustCompile(`\d+`)
	ckptNameExt = regexp.MustCompile(`^\.[A-Za-z][A-Za-z0-9]*$`)
)

// StepOf reads a step number from a checkpoint's base name: the
// number after the last "step=" when there is one (Lightning's
// "epoch=3-step=1200.ckpt" gives 1200), otherwise the last number in the
// name once a final extension that starts with a letter is set aside
// ("step_1000.pt" 1000, "checkpoint-500" 500, "global_step300" 300,
// "model.h5" none). ok is false when there is no number or it overflows.
func StepOf(base string) (step int64, ok bool) {
	var digits string
	if m := ckptStepEq.FindAllStringSubmatch(base, -1); m != nil {
		digits = m[len(m)-1][1]
	} else {
		name := base
		if ext := filepath.Ext(base); ext != base && ckptNameExt.MatchString(ext) {
			name = strings.TrimSuffix(base, ext)
		}
		all := ckptDigits.FindAllString(name, -1)
		if all == nil {
			return 0, false
		}
		digits = all[len(all)-1]
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// less orders checkpoints best first (see Better).
func (cs *ckptSpec) less(a, b Checkpoint) bool { return better(cs.highest, a, b) }

// Better reports whether a comes before b in the order Scan sorts by under
// choose (Spec.Choose): complete before incomplete, then by the choice
// (newest modification time, or highest step with numbered names before
// unnumbered ones), then by the other key, then by path. It is the one
// order in which gpuguard picks a checkpoint to resume from.
func Better(choose string, a, b Checkpoint) bool {
	return better(choose == "highest_step", a, b)
}

func better(highest bool, a, b Checkpoint) bool {
	if a.Complete != b.Complete {
		return a.Complete
	}
	byStep := func() (bool, bool) {
		if (a.Step == nil) != (b.Step == nil) {
			return a.Step != nil, true
		}
		if a.Step != nil && *a.Step != *b.Step {
			return *a.Step > *b.Step, true
		}
		return false, false
	}
	if highest {
		if r, ok := byStep(); ok {
			return r
		}
	}
	if !a.ModTime.Equal(b.ModTime) {
		return a.ModTime.After(b.ModTime)
	}
	if r, ok := byStep(); ok {
		return r
	}
	return a.Path < b.Path
}

// Scan lists the checkpoints that spec's globs match under dir
// (the job's working directory; absolute globs ignore it), each judged
// complete or not as of now, best first: complete ones before incomplete
// ones, then in the order spec.Choose prefers.
//
// One scan sees only the file system, so a file or a directory without a
// marker is complete only once its newest modification time is at least
// spec.Quiet before now (renames are seen only by the watcher). Drive now
// explicitly to ask "as of when". Nothing is written: files are stat'ed, and
// a JSON marker is read.
//
// Errors: ErrNoGlobs, a malformed glob, an unknown Choose. A
// missing directory is not an error: it holds no checkpoints yet.
func Scan(dir string, spec Spec, now time.Time) ([]Checkpoint, error) {
	cs, err := compileCkptSpec(dir, spec)
	if err != nil {
		return nil, err
	}
	return cs.scan(now), nil
}

func (cs *ckptSpec) scan(now time.Time) []Checkpoint {
	found := cs.find()
	out := make([]Checkpoint, 0, len(found))
	for _, f := range found {
		c, _ := cs.evaluate(f, now, ckptObs{})
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return cs.less(out[i], out[j]) })
	return out
}

// Latest is the best complete checkpoint of Scan, and
// false when none is complete (or none exists). Errors as Scan.
func Latest(dir string, spec Spec, now time.Time) (Checkpoint, bool, error) {
	all, err := Scan(dir, spec, now)
	if err != nil || len(all) == 0 || !all[0].Complete {
		return Checkpoint{}, false, err
	}
	return all[0], true, nil
}

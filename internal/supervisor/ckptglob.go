package supervisor

import (
	"fmt"

	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
)

// Checkpoint globs checked against what the job does. A glob that matches
// none of the job's checkpoints is found out only at the first relaunch,
// which then starts over from scratch: hours of work. So the dry run says
// when a glob matches nothing now, and during a run, when the job says it
// saved a checkpoint at a path no glob matches, gpuguard says so once, with
// a glob that would.

// globsMatch reports whether a checkpoint glob (relative to wd) matches
// path, or a directory holding it (a file saved inside a checkpoint
// directory).
func globsMatch(globs []string, wd, path string) bool {
	if !filepath.IsAbs(path) {
		path = filepath.Join(wd, path)
	}
	path = filepath.Clean(path)
	for _, g := range globs {
		if !filepath.IsAbs(g) {
			g = filepath.Join(wd, g)
		}
		for p := path; ; p = filepath.Dir(p) {
			if ok, _ := filepath.Match(g, p); ok {
				return true
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return false
}

var digitsRE = regexp.MustCompile(`[0-9]+`)

// globFor is a glob that matches path and its siblings of other steps:
// path relative to wd (when under it), every run of digits a `*`
// ("lightning_logs/version_*/checkpoints/epoch=*-step=*.ckpt").
func globFor(wd, path string) string {
	if filepath.IsAbs(path) {
		if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
			path = rel
		}
	}
	path = filepath.Clean(path)
	var b strings.Builder
	for i, part := range strings.Split(path, string(filepath.Separator)) {
		if i > 0 {
			b.WriteByte(filepath.Separator)
		}
		lit := 0
		for _, m := range digitsRE.FindAllStringIndex(part, -1) {
			b.WriteString(escapeGlob(part[lit:m[0]]))
			b.WriteByte('*')
			lit = m[1]
		}
		b.WriteString(escapeGlob(part[lit:]))
	}
	return b.String()
}

func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}

// checkSaved is called with each line of the job's output: when the line
// says a checkpoint was saved at a path that no glob of the policy matches,
// it says so, once per run.
func (l *loop) checkSaved(text []byte) {
	if l.unmatchedSaid.Load() {
		return
	}
	path, ok := checkpoint.SavedPath(text)
	if !ok || globsMatch(l.spec.Globs, l.wd, path) {
		return
	}
	if !l.unmatchedSaid.CompareAndSwap(false, true) {
		return
	}
	globs := "the policy has no checkpoint globs"
	if len(l.spec.Globs) > 0 {
		globs = "globs: " + strings.Join(l.spec.Globs, ", ")
	}
	l.status.Printf("warning: the job saved a checkpoint at %s, which no checkpoint glob matches (%s): a relaunch cannot resume from it. A glob that would: checkpoints: {globs: [%q]}",
		displayPath(path, l.wd), globs, globFor(l.wd, path))
}

// UnmatchedGlobs are the checkpoint globs (expanded) when none of them
// matches anything in wd now, for the dry run and `gpuguard policy check`;
// nil when one does (the others are alternatives: a framework saves in one
// layout).
func UnmatchedGlobs(globs []string, wd string) []string {
	for _, g := range globs {
		pat := g
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(wd, pat)
		}
		if m, err := filepath.Glob(pat); err != nil || len(m) > 0 {
			return nil
		}
	}
	return globs
}

// UnmatchedGlobWarning is what the dry run and `gpuguard policy check` say
// of checkpoint globs none of which matches anything now.
func UnmatchedGlobWarning(globs []string) string {
	what := "checkpoint glob " + globs[0] + " matches nothing"
	if len(globs) > 1 {
		what = "none of the checkpoint globs (" + strings.Join(globs, ", ") + ") matches anything"
	}
	return fmt.Sprintf("warning: %s in the job's directory now: fine before the job's first save; otherwise no relaunch will find a checkpoint to resume from", what)
}

// ckptSaveHook checks each output line for a checkpoint saved where no
// glob of the policy looks (checkSaved).
type ckptSaveHook struct{ l *loop }

func (h ckptSaveHook) line(_ *attemptRun, ln lines.Line) {
	h.l.checkSaved(ln.Text)
	h.l.ck.mu.Lock()
	if h.l.ck.out != nil {
		h.l.ck.out.Line(ln.Text)
	}
	h.l.ck.mu.Unlock()
}

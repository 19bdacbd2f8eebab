package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks is the README's bash blocks from the heading from up to the
// heading to, each as one script.
func readmeBlocks(t *testing.T, from, to string) []string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n"+from+"\n")
	if !ok {
		t.Fatalf("README.md has no %q heading", from)
	}
	rest, _, ok = strings.Cut(rest, "\n"+to+"\n")
	if !ok {
		t.Fatalf("README.md has no %q heading after %q", to, from)
	}
	var blocks []string
	for {
		_, after, ok := strings.Cut(rest, "```bash\n")
		if !ok {
			return blocks
		}
		block, after, ok := strings.Cut(after, "```")
		if !ok {
			t.Fatalf("README.md: a bash block after %q is not closed", from)
		}
		blocks = append(blocks, block)
		rest = after
	}
}

// The README's commands, from "Try it" to "Install", work in a fresh clone
// (of the last commit: uncommitted edits are not in it) and leave nothing in
// it but .gpuguard/, gpuguard's own folder, which git ignores: the clone's
// top-level entries, ignored ones included, are the same before and after
// but for .gpuguard, nothing else anywhere is new, ignored or not, and the
// next build's version (git describe --dirty) does not read "modified".
func TestReadmeLeavesCloneClean(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuguard three times and runs the example: not in -short")
	}
	tools(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the README's example job needs python3, which is not on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(t.TempDir(), "gpuguard")
	if out, err := exec.Command("git", "clone", "-q", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone %s: %v\n%s", root, err, out)
	}
	before := topLevel(t, clone)
	if before[".gpuguard"] {
		t.Fatalf("a fresh clone of %s holds .gpuguard: is it committed?", root)
	}
	gobin := t.TempDir()
	blocks := readmeBlocks(t, "## Try it (no GPU needed)", "## Test")
	if len(blocks) < 3 {
		t.Fatalf("README.md's Try it and Install sections have %d bash blocks, want the example's, report's and install's", len(blocks))
	}
	for _, block := range blocks {
		var lines []string
		for _, line := range strings.Split(block, "\n") {
			// The published module is fetched from the module proxy: the
			// clone's own `go install .` stands for it here.
			if strings.Contains(line, "@latest") {
				t.Logf("not run (fetches the published module): %s", line)
				continue
			}
			lines = append(lines, line)
		}
		script := strings.Join(lines, "\n")
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = clone
		cmd.Env = append(os.Environ(), "GOBIN="+gobin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README command in a fresh clone:\n%s\nfailed: %v\n%s", script, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(gobin, "gpuguard")); err != nil {
		t.Errorf("go install . put no gpuguard in GOBIN: %v", err)
	}

	// The root: what was there, and .gpuguard, nothing else.
	after := topLevel(t, clone)
	for name := range after {
		if !before[name] && name != ".gpuguard" {
			t.Errorf("the README's commands left %s in the clone's root; what they write belongs under .gpuguard/", name)
		}
	}
	for name := range before {
		if !after[name] {
			t.Errorf("the README's commands removed %s from the clone's root", name)
		}
	}
	if !after[".gpuguard"] {
		t.Errorf("the README's commands made no .gpuguard in the clone's root, where its text says they write")
	}
	// Anywhere in the clone: .gpuguard/ is all git lists, ignored files
	// included (a __pycache__ beside the example would show here).
	status, err := gitIn(clone, "status", "--porcelain", "--ignored")
	if err != nil || status != "!! .gpuguard/\n" {
		t.Errorf("after the README's commands, git status --porcelain --ignored lists more than .gpuguard/ (%v):\n%s", err, status)
	}
	if v, err := gitIn(clone, "describe", "--always", "--dirty"); err != nil || strings.HasSuffix(strings.TrimSpace(v), "-dirty") {
		t.Errorf("git describe --dirty after the README's commands: %q %v", v, err)
	}
	// The release binaries the README's table names are where it says.
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	bins := regexp.MustCompile("(?m)^\\| `([^`]*gpuguard-linux-amd64[^`]*)` \\|").FindAllStringSubmatch(string(readme), -1)
	if len(bins) != 2 {
		t.Errorf("README.md's release table names %d binaries, want 2 (the NVML and the static one)", len(bins))
	}
	for _, m := range bins {
		if _, err := os.Stat(filepath.Join(clone, m[1])); err != nil {
			t.Errorf("README.md's release table names %s, which scripts/release.sh did not write: %v", m[1], err)
		}
	}
	gg, _ := os.ReadDir(filepath.Join(clone, ".gpuguard"))
	var names []string
	for _, e := range gg {
		names = append(names, e.Name())
	}
	t.Logf("left in the clone: .gpuguard/ holding %s", strings.Join(names, ", "))
}

// topLevel is the set of entries in dir, hidden and git-ignored ones
// included.
func topLevel(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

func gitIn(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	return string(out), err
}

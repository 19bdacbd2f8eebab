package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The project is found as git finds a repository: from the working
// directory up. Every command looks the same way, so that `gpuguard report`
// in a subdirectory reports the run `gpuguard run` started there, and
// `gpuguard policy check` checks the policy `gpuguard run` uses:
//
//   - the policy is the nearest gpuguard.yaml (or gpuguard.yml);
//   - the runs are the nearest .gpuguard/runs;
//
// each searched from the working directory up to the repository's root (the
// first directory holding .git). Outside a repository only the working
// directory is searched, as presets.Load does for the policy, so that a
// stray file in a home directory is never picked up.

// searchDirs are the directories searched from wd: wd and its parents up to
// the repository's root, or wd alone outside a repository.
func searchDirs(wd string) []string {
	start, err := filepath.Abs(wd)
	if err != nil {
		return []string{wd}
	}
	var dirs []string
	for dir := start; ; {
		dirs = append(dirs, dir)
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dirs
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dirs[:1]
		}
		dir = parent
	}
}

// findUp is the first of searchDirs(wd) that holds name, or "".
func findUp(wd string, names ...string) (dir, name string) {
	for _, d := range searchDirs(wd) {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(d, n)); err == nil {
				return d, n
			}
		}
	}
	return "", ""
}

// projectRunsDir is the directory whose .gpuguard/runs holds the project's
// runs, as seen from wd: the nearest one up, else wd itself.
func projectRunsDir(wd string) string {
	if dir, _ := findUp(wd, runsDir); dir != "" {
		return dir
	}
	return wd
}

// projectPolicy is the project's policy file as seen from wd (relative to
// wd when it can be), or "" when there is none.
func projectPolicy(wd string) string {
	dir, name := findUp(wd, "gpuguard.yaml", "gpuguard.yml")
	if dir == "" {
		return ""
	}
	return relTo(wd, filepath.Join(dir, name))
}

// relTo is path relative to wd when that is shorter to read (within a few
// levels up), else path.
func relTo(wd, path string) string {
	abs, err := filepath.Abs(wd)
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(abs, path)
	if err != nil {
		return path
	}
	return rel
}

// sameDir says whether a and b are one directory.
func sameDir(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// sayFound tells the user, on w, which file of the project a command uses
// when it is not in the working directory.
func sayFound(w io.Writer, command, what, path string) {
	fmt.Fprintf(w, "gpuguard %s: %s %s (found above this folder)\n", command, what, path)
}

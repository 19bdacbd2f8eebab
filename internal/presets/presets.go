// Package presets holds gpuguard's built-in policy presets, finds and reads
// the policy a run uses (Load), and guesses which preset suits a command
// (Guess). Unlike package policy it does I/O: it reads policy files. The
// `gpuguard policy` commands are in package cli.
package presets

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuguard/gpuguard/internal/fsutil"
	"github.com/gpuguard/gpuguard/internal/policy"
)

//go:embed *.yaml
var presets embed.FS

// PresetPrefix starts the file name Load returns for a preset, so that
// messages read "preset:lightning:12:5: ...".
const PresetPrefix = "preset:"

// Names returns the names of the built-in presets, sorted.
func Names() []string {
	entries, _ := presets.ReadDir(".")
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Lookup returns the text of the preset called name.
func Lookup(name string) (data []byte, ok bool) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return nil, false
	}
	data, err := presets.ReadFile(name + ".yaml")
	return data, err == nil
}

// fileNames are the names Load looks for when no policy is given, in order
// of preference within one directory.
var fileNames = []string{"gpuguard.yaml", "gpuguard.yml"}

// Load resolves the --policy argument.
//
// nameOrPath is a path when it contains a path separator or ends in .yaml
// or .yml (relative paths are taken from workDir); otherwise it is a preset
// name, or failing that a file in workDir. The filename returned is the
// path read, or "preset:NAME" for a preset.
//
// When nameOrPath is "", Load looks for gpuguard.yaml (or gpuguard.yml) in
// workDir and each parent up to the repository root, the first directory
// holding .git (a directory, or a file in a worktree or submodule). Outside
// a repository only workDir itself is searched, so that a stray file in a
// home directory is never picked up. It returns ("", nil, nil) when there is
// none: the run then has no policy and never relaunches.
//
// Errors say which file could not be read and why, or which preset names
// exist.
func Load(nameOrPath, workDir string) (filename string, data []byte, err error) {
	if nameOrPath == "" {
		return discover(workDir)
	}
	isPath := strings.ContainsRune(nameOrPath, filepath.Separator) || strings.ContainsRune(nameOrPath, '/') ||
		strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml")
	if !isPath {
		if data, ok := Lookup(nameOrPath); ok {
			return PresetPrefix + nameOrPath, data, nil
		}
	}
	path := nameOrPath
	if !filepath.IsAbs(path) {
		path = filepath.Join(workDir, path)
	}
	data, err = fsutil.ReadFileLimit(path, policy.MaxFileBytes)
	switch {
	case err == nil:
		return path, data, nil
	case !isPath && errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Errorf("no policy file %q and no built-in preset by that name%s; presets: %s", nameOrPath, policy.DidYouMean(nameOrPath, Names()), strings.Join(Names(), ", "))
	}
	return "", nil, fmt.Errorf("reading policy file: %w", err)
}

func discover(workDir string) (string, []byte, error) {
	start, err := filepath.Abs(workDir)
	if err != nil {
		return "", nil, fmt.Errorf("looking for gpuguard.yaml from %s: %w", workDir, err)
	}
	// Find the repository root; outside a repository search start only.
	dirs := []string{}
	inRepo := false
	for dir := start; ; {
		dirs = append(dirs, dir)
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			inRepo = true
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if !inRepo {
		dirs = dirs[:1]
	}
	for _, dir := range dirs {
		for _, name := range fileNames {
			path := filepath.Join(dir, name)
			data, err := fsutil.ReadFileLimit(path, policy.MaxFileBytes)
			if err == nil {
				return path, data, nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return "", nil, fmt.Errorf("reading policy file: %w", err)
			}
		}
	}
	return "", nil, nil
}

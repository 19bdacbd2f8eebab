// Package torchprobe is gpuguard's probe inside a PyTorch job (`gpuguard run
// --probe torch`): a sitecustomize.py that gpuguard writes into the run
// directory and puts first on the job's PYTHONPATH. Once the job imports
// torch it reports phases (Module.train/eval, forwards with and without
// grad), optimizer steps, memory, and where an out-of-memory error was
// raised (module path, pass, phase, step, input shapes), one JSON line per
// event in a file per process under GPUGUARD_PROBE_DIR. This package writes
// the Python files, sets the environment, and follows those files.
// docs/probe.md describes it.
package torchprobe

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuguard/gpuguard/internal/envlist"
)

// Name is the --probe value that turns the probe on.
const Name = "torch"

// Environment variables the probe reads; set only with --probe.
const (
	EnvDir    = "GPUGUARD_PROBE_DIR" // where each process writes probe-<pid>.jsonl
	envPyPath = "PYTHONPATH"
)

//go:embed py/sitecustomize.py py/gpuguard_torchprobe.py
var files embed.FS

// Install writes the probe's Python files into siteDir (created), the
// directory Env puts first on PYTHONPATH.
func Install(siteDir string) error {
	if err := os.MkdirAll(siteDir, 0o755); err != nil {
		return fmt.Errorf("cannot write the torch probe: %w", err)
	}
	for _, name := range []string{"sitecustomize.py", "gpuguard_torchprobe.py"} {
		data, err := files.ReadFile("py/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(siteDir, name), data, 0o644); err != nil {
			return fmt.Errorf("cannot write the torch probe: %w", err)
		}
	}
	return nil
}

// Env is env with siteDir first on PYTHONPATH (the user's entries kept
// after it) and GPUGUARD_PROBE_DIR set to recDir.
func Env(env []string, siteDir, recDir string) []string {
	path := siteDir
	if old := envlist.Get(env, envPyPath); old != "" {
		path += string(os.PathListSeparator) + old
	}
	env = envlist.Set(env, envPyPath, path)
	return envlist.Set(env, EnvDir, recDir)
}

// Dirs are where the probe of a run's attempt n lives: the Python files
// (shared by the attempts) and the attempt's records.
func Dirs(runDir string, n int) (site, records string) {
	base := filepath.Join(runDir, "probe")
	return filepath.Join(base, "site"), filepath.Join(base, fmt.Sprintf("attempt-%d", n))
}

// Valid reports whether name is a probe this gpuguard has ("" is none).
func Valid(name string) bool {
	return name == "" || strings.EqualFold(name, Name)
}

package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Latest is the word that names the newest run directory.
const Latest = "latest"

// runsDir is where `gpuguard run` keeps its runs, relative to the directory
// it was started in.
var runsDir = filepath.Join(".gpuguard", "runs")

// resolveRun turns a command's run argument into a run directory: "latest"
// (or nothing) is the newest run directory under the project's
// .gpuguard/runs, the nearest one from dir up (projectRunsDir), unless dir
// holds a file or directory named "latest"; anything else is itself. above
// says the runs were found above dir (the path returned is then relative to
// dir, e.g. ../.gpuguard/runs/ID), which the command says.
func resolveRun(arg, dir string) (path string, above bool, err error) {
	if arg != "" && arg != Latest {
		return arg, false, nil
	}
	if arg == Latest {
		if _, err := os.Lstat(filepath.Join(dir, Latest)); err == nil {
			return arg, false, nil
		}
	}
	root := projectRunsDir(dir)
	runs := runDirs(root)
	if len(runs) == 0 {
		return "", false, &exitcode.Error{Code: exitcode.NoInput,
			Msg: "no run directory under " + runsDir + " here, so no latest run; name a run directory, or start one with `gpuguard run -- COMMAND` (" + runsDir + " is looked for from here up to the repository's root)"}
	}
	above = !sameDir(root, dir)
	return filepath.Join(relTo(dir, root), runs[len(runs)-1]), above, nil
}

// runDirs are the run directories under .gpuguard/runs in dir, relative to
// dir, oldest first: by name (the time the run started, to the second),
// then by when their journal was last written.
func runDirs(dir string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, runsDir))
	if err != nil {
		return nil
	}
	type run struct {
		path string
		name string
		mod  int64
	}
	var runs []run
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(runsDir, e.Name())
		var mod int64
		st, err := os.Stat(filepath.Join(dir, p, record.Events))
		if errors.Is(err, fs.ErrNotExist) {
			st, err = os.Stat(filepath.Join(dir, p))
		}
		if err == nil {
			mod = st.ModTime().UnixNano()
		}
		runs = append(runs, run{p, e.Name(), mod})
	}
	sort.Slice(runs, func(i, j int) bool {
		// Names are "20060102-150405-xxxxxx": two started in the same
		// second are told apart by their journals.
		a, b := runs[i].name[:min(15, len(runs[i].name))], runs[j].name[:min(15, len(runs[j].name))]
		if a != b {
			return a < b
		}
		return runs[i].mod < runs[j].mod
	})
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.path
	}
	return out
}

package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The layers of docs/architecture.md, as the code must keep them. Each
// package of the module has a layer; a package may import the packages of its
// own layer and of the layers mayImport lists for it, and no other. A package
// that is not in the table fails the test: give a new package its layer
// here, and in the picture.
type layer string

const (
	wiring     layer = "wiring"   // main.go and the command line
	act        layer = "act"      // the run loop, one attempt's processes, the multi-node group
	show       layer = "show"     // the commands that read: explain, report, doctor
	decide     layer = "decide"   // the policy, pure
	observe    layer = "observe"  // the probes that sample and watch
	recorder   layer = "record"   // the run directory, what its files hold, who follows them
	classifier layer = "classify" // the output classifier and its vocabulary (Verdict, Kind, Phase), pure
	shared     layer = "shared"   // small helpers every layer may use
	tests      layer = "tests"    // test suites, test doubles and benchmarks: nothing else imports them
)

// mayImport says which other layers each layer imports (its own is always
// allowed). Arrows point down the picture only.
var mayImport = map[layer][]layer{
	wiring:     {act, show, decide, observe, recorder, classifier, shared},
	act:        {decide, observe, recorder, classifier, shared},
	show:       {decide, observe, recorder, classifier, shared},
	decide:     {classifier, shared},
	observe:    {recorder, classifier, shared},
	recorder:   {classifier, shared},
	classifier: {shared},
	shared:     {},
	tests:      {wiring, act, show, decide, observe, recorder, classifier, shared},
}

// layers places every package of the module, by import path under the
// module. internal/attempt, internal/redact and internal/fsutil are placed
// ahead of the branches that add them.
var layers = map[string]layer{
	"":             wiring,
	"internal/cli": wiring,

	"internal/supervisor": act,
	"internal/attempt":    act, // the process side: start, signals, pty, the process tree
	"internal/group":      act,

	"internal/explain": show,
	"internal/report":  show,
	"internal/doctor":  show,

	"internal/policy":  decide,
	"internal/presets": decide,

	"internal/probes/checkpoint": observe,
	"internal/probes/gpu":        observe,
	"internal/probes/memory":     observe,
	"internal/probes/procfs":     observe,
	"internal/probes/settings":   observe,
	"internal/probes/slurmenv":   observe,
	"internal/probes/torchprobe": observe,

	"internal/rundir":        recorder,
	"internal/rundir/record": recorder,
	"internal/notify":        recorder,
	"internal/metrics":       recorder,

	"internal/probes/classify": classifier,

	"internal/allocconf": shared,
	"internal/envinject": shared,
	"internal/envlist":   shared,
	"internal/exitcode":  shared,
	"internal/humanize":  shared,
	"internal/lines":     shared,
	"internal/redact":    shared,
	"internal/fsutil":    shared,

	"internal/supervisor/supervisortest": tests,
	"internal/probes/gpu/gputest":        tests,
	"internal/probes/gpu/nvmltest":       tests,
	"internal/probes/procfs/procfstest":  tests,
	"e2e":                                tests,
	"examples":                           tests,
	"reliability":                        tests,
	"scripts":                            tests,
	"slurm":                              tests,
	"slurm/internal/slurmtest":           tests,
	"slurm/multinode":                    tests,
	"bench/chatty":                       tests,
	"bench/hang":                         tests,
	"bench/internal/stat":                tests,
	"bench/latency":                      tests,
	"bench/ptyrelay":                     tests,
	"bench/relaunch":                     tests,
}

// pure lists the packages that must not link the GPU driver, the file-system
// notifier, the logger, or start processes (os/exec): the policy and the
// classifier, and what reads a run directory (report, explain, record).
var pure = []string{
	"internal/policy", "internal/presets", "internal/probes/classify", "internal/explain", "internal/report",
	"internal/rundir/record", "internal/allocconf", "internal/envinject", "internal/envlist", "internal/humanize",
	"internal/lines", "internal/exitcode", "internal/redact",
}

var impure = []string{"github.com/NVIDIA/go-nvml", "github.com/fsnotify/fsnotify", "go.uber.org/zap", "os/exec"}

const module = "github.com/gpuguard/gpuguard"

// TestLayers checks every package's imports against the table: each arrow
// points down, every package has a layer, and the pure packages link none of
// the impure ones.
func TestLayers(t *testing.T) {
	pkgs := imports(t)
	violation := func(what, why string) {
		t.Helper()
		t.Errorf("%s: %s", what, why)
	}
	for _, f := range pkgs {
		pkg := rel(f[0])
		from, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s has no layer: add it to the table in layers_test.go and to the picture in docs/architecture.md", orRoot(pkg))
			continue
		}
		for _, imp := range f[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to, ok := layers[rel(imp)]
			if !ok || to == from || slices.Contains(mayImport[from], to) {
				continue // a missing layer is reported for the package itself
			}
			violation(orRoot(pkg)+" -> "+rel(imp),
				"a "+string(from)+" package imports a "+string(to)+" package, an arrow the layers do not allow (docs/architecture.md)")
		}
	}
	for _, p := range pure {
		out, err := exec.Command("go", "list", "-deps", "./"+p).Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", p, err)
		}
		for _, bad := range impure {
			for _, d := range strings.Fields(string(out)) {
				if d == bad || strings.HasPrefix(d, bad+"/") {
					violation(p+" links "+bad, "a pure package depends on "+d)
					break
				}
			}
		}
	}
}

// The table and the picture name the same packages: the picture in
// docs/architecture.md lists each package of the table under its layer.
func TestLayersMatchThePicture(t *testing.T) {
	doc := readPicture(t)
	for pkg, l := range layers {
		if l == tests || l == wiring {
			continue
		}
		row, ok := doc[pkg]
		if !ok {
			t.Errorf("docs/architecture.md's picture does not show %s (layer %s)", pkg, l)
			continue
		}
		if row != l {
			t.Errorf("docs/architecture.md's picture shows %s in %s, the table in %s", pkg, row, l)
		}
	}
	for pkg := range doc {
		if _, ok := layers[pkg]; !ok {
			t.Errorf("docs/architecture.md's picture shows %s, which the table does not place", pkg)
		}
	}
}

func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

func orRoot(pkg string) string {
	if pkg == "" {
		return "gpuguard (main)"
	}
	return pkg
}

// readPicture reads the picture in docs/architecture.md: the first fenced
// block after "## The picture", where a line that begins with a layer's name
// starts that layer's rows, and each internal/... path on a row is a package
// of the layer.
func readPicture(t *testing.T) map[string]layer {
	t.Helper()
	data, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "## The picture\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## The picture" section`)
	}
	parts := strings.SplitN(after, "```", 3)
	if len(parts) < 3 {
		t.Fatal("docs/architecture.md: the picture is not in a fenced block")
	}
	pkgRe := regexp.MustCompile(`internal/[a-z0-9/]*[a-z0-9]`)
	doc := map[string]layer{}
	var cur layer
	for _, line := range strings.Split(parts[1], "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			if _, ok := mayImport[layer(f[0])]; ok {
				cur = layer(f[0])
			}
		}
		for _, pkg := range pkgRe.FindAllString(line, -1) {
			if cur == "" {
				t.Errorf("docs/architecture.md's picture shows %s above the first layer's name", pkg)
				continue
			}
			if prev, dup := doc[pkg]; dup && prev != cur {
				t.Errorf("docs/architecture.md's picture shows %s in %s and in %s", pkg, prev, cur)
			}
			doc[pkg] = cur
		}
	}
	return doc
}

// Only the supervisor, its process side and notify (the user's
// --notify-command, run with sh -c) start processes; test packages and
// benchmarks may.
func TestWhoStartsProcesses(t *testing.T) {
	starters := []string{"internal/supervisor", "internal/attempt", "internal/notify"}
	for _, f := range imports(t) {
		pkg := rel(f[0])
		if slices.Contains(f[1:], "os/exec") && !slices.Contains(starters, pkg) && layers[pkg] != tests {
			t.Errorf("%s imports os/exec: only %s start processes (docs/architecture.md)", orRoot(pkg), strings.Join(starters, ", "))
		}
	}
}

// imports lists each package of the module with its imports (not its
// tests'), as "path imp imp ...".
func imports(t *testing.T) [][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to list imports")
	}
	out, err := exec.Command(goTool, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkgs = append(pkgs, strings.Fields(line))
	}
	return pkgs
}

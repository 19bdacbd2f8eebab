package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The layers' rules that imports can break (docs/architecture.md): the
// policy, the classifier and explain stay pure, free of the packages that
// reach the GPU driver, the file-system notifier and the logger; and no
// package below the supervisor imports it.
func TestLayers(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to list imports")
	}
	deps := func(pkg string) []string {
		out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/gpuguard/gpuguard/internal/"
	pure := []string{"policy", "presets", "probes/classify", "explain", "rundir/record", "allocconf", "envlist", "humanize", "lines", "exitcode", "redact"}
	forbidden := []string{"github.com/NVIDIA/go-nvml", "github.com/fsnotify/fsnotify", "go.uber.org/zap", "os/exec", mod + "supervisor"}
	for _, p := range pure {
		for _, d := range deps("./internal/" + p) {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("internal/%s depends on %s", p, d)
				}
			}
		}
	}
	for _, p := range []string{"probes/...", "policy", "rundir/...", "explain", "report", "doctor"} {
		for _, d := range deps("./internal/" + p) {
			if d == mod+"supervisor" || d == mod+"cli" {
				t.Errorf("internal/%s depends on %s, a layer above it", p, d)
			}
		}
	}
}

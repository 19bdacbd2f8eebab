package rundir

import (
	"os/exec"
	"strings"
	"testing"
)

// Issue 22: state.json's schema and the timeline reader live in
// rundir/record, so that rundir imports no policy and report, which reads a
// run directory, links neither the memory sampler nor NVML nor zap. (The
// layers table of the root's layers_test.go may take these rows over.)
func TestRunDirectoryReadersStayLight(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to list imports")
	}
	const mod = "github.com/gpuguard/gpuguard/internal/"
	for pkg, forbidden := range map[string][]string{
		"./...":        {mod + "policy", "github.com/NVIDIA/go-nvml"},
		"../report":    {mod + "policy", mod + "probes/memory", "github.com/NVIDIA/go-nvml", "go.uber.org/zap"},
		"./record/...": {mod + "policy", "github.com/NVIDIA/go-nvml", "go.uber.org/zap"},
	} {
		out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}

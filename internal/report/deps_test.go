package report

import (
	"os/exec"
	"strings"
	"testing"
)

// Issue 22: report read the timeline through the memory sampler's package,
// and so linked NVML and zap. It reads the run directory through
// rundir/record only.
func TestReportLinksNoSampler(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to list imports")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		for _, f := range []string{"github.com/NVIDIA/go-nvml", "go.uber.org/zap", "github.com/gpuguard/gpuguard/internal/probes/memory", "github.com/gpuguard/gpuguard/internal/policy"} {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("report depends on %s", d)
			}
		}
	}
}

package rundir

import (
	"os/exec"
	"strings"
	"testing"
)

// Issue 22: rundir imported the policy for state.json's schema; the schema
// is record.RunState, generic in the policy's state, and rundir (record
// included) depends on no policy.
func TestRundirImportsNoPolicy(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to list imports")
	}
	out, err := exec.Command(goTool, "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d == "github.com/gpuguard/gpuguard/internal/policy" || strings.HasPrefix(d, "github.com/NVIDIA/go-nvml") {
			t.Errorf("rundir depends on %s", d)
		}
	}
}

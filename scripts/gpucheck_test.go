package scripts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gpu-check.sh on a machine without a GPU (every CI machine) says so and
// exits 2 before building or running anything; with a GPU it runs the checks
// docs/gpu-validation.md lists. Here nvidia-smi is a stand-in that finds no
// device, as the real one does on a machine whose driver sees none.
func TestGPUCheckWithoutGPU(t *testing.T) {
	bin := t.TempDir()
	smi := "#!/bin/sh\necho 'No devices were found'\nexit 6\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "gpu-check.sh", out)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	got, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("gpu-check.sh without a GPU: %v, want exit status 2\n%s", err, got)
	}
	if !strings.Contains(string(got), "gpu-check: no GPU found (nvidia-smi -L: No devices were found") {
		t.Errorf("gpu-check.sh does not say there is no GPU:\n%s", got)
	}
	summary, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	if err != nil || !strings.Contains(string(summary), "no GPU found") {
		t.Errorf("summary.txt: %v\n%s", err, summary)
	}
	if _, err := os.Stat(filepath.Join(out, "build.txt")); err == nil {
		t.Errorf("gpu-check.sh built gpuguard with no GPU to check")
	}
}

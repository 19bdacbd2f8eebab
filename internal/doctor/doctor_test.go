package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/exitcode"
)

// TestDoctorReal runs doctor against this machine: on CI (no GPU, no
// driver) it must say why NVML is unavailable and still report host memory,
// the cgroup and the allocator environment; on a GPU machine the figures
// must be consistent.
func TestDoctorReal(t *testing.T) {
	t.Setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("SLURM_PROCID", "0")
	var out bytes.Buffer
	runErr := Command(Options{JSON: true, Stdout: &out})
	code := exitcode.Of(runErr)
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON (%v): %s %v", err, out.String(), runErr)
	}
	if (code == 1) != (len(rep.Busy) > 0) || (code != 0 && code != 1) {
		t.Errorf("exit %d with busy %v", code, rep.Busy)
	}
	if !rep.NVML.Available {
		if rep.NVML.Why == "" || len(rep.NVML.GPUs) != 0 {
			t.Errorf("unavailable NVML without a reason: %+v", rep.NVML)
		}
		t.Logf("NVML: %s", rep.NVML.Why)
	}
	for _, g := range rep.NVML.GPUs {
		if g.UUID == "" || g.TotalBytes == 0 || g.UsedBytes > g.TotalBytes {
			t.Errorf("GPU %+v", g)
		}
	}
	if rep.Host == nil || rep.Host.MemTotalBytes == 0 || rep.Host.MemAvailableBytes > rep.Host.MemTotalBytes {
		t.Errorf("host: %+v %s", rep.Host, rep.HostError)
	}
	if rep.Env["PYTORCH_CUDA_ALLOC_CONF"] != "expandable_segments:True" {
		t.Errorf("env %v", rep.Env)
	}
	if rep.Slurm == nil || rep.Slurm.JobID != "4242" {
		t.Errorf("slurm %+v", rep.Slurm)
	}

	out.Reset()
	Command(Options{Stdout: &out})
	text := out.String()
	for _, want := range []string{"GPUs: ", "Host memory: ", "Slurm: job 4242, rank 0, restart 0", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestDescribeProcessNotVisible(t *testing.T) {
	p := process{PID: 1 << 30}
	describeProcess("/proc", &p)
	if p.Visible || p.Stale || !strings.Contains(p.Status, "not visible") {
		t.Errorf("%+v", p)
	}
	self := process{PID: os.Getpid()}
	describeProcess("/proc", &self)
	if !self.Visible || self.Command == "" || self.User == "" || self.Stale {
		t.Errorf("%+v", self)
	}
}

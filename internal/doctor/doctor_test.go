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

// What PyTorch's allocator would reject is reported, with what was meant.
func TestAllocConfProblems(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"expandable_segments:True", ""},
		{"expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.6", ""},
		{"roundup_power2_divisions:[256:1,512:2,>:4],backend:cudaMallocAsync", ""},
		{"roundup_power2_divisions:4, pinned_num_register_threads:8,", ""},
		{"expandable_segment:True", `X=expandable_segment:True: unknown option "expandable_segment" (did you mean "expandable_segments"?); PyTorch rejects it at its first CUDA allocation`},
		{"expandable_segments:true", `X=expandable_segments:true: expandable_segments must be True or False (capitalised), not "true"`},
		{"max_split_size_mb:16", `X=max_split_size_mb:16: max_split_size_mb must be a whole number above 20, not "16"`},
		{"garbage_collection_threshold:1.5", `X=garbage_collection_threshold:1.5: garbage_collection_threshold must be a number between 0 and 1 (exclusive), not "1.5"`},
		{"backend:async", `X=backend:async: backend must be native or cudaMallocAsync, not "async"`},
		{"expandable_segments", "X=expandable_segments: "},
		{"roundup_power2_divisions:3", "roundup_power2_divisions must be a power of two"},
	} {
		got := strings.Join(allocConfProblems("X", tc.value), "\n")
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) && !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.value, got, tc.want)
		}
	}
}

// The JSON has every key, whatever the machine: [] for none, null for no
// Slurm job; a misspelt allocator option is a problem, and status 78.
func TestDoctorJSONKeys(t *testing.T) {
	var out bytes.Buffer
	err := run(Options{JSON: true, Stdout: &out}, inputs{
		procRoot: "/proc", selfPID: os.Getpid(),
		env:  []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segment:True"},
		gpus: func([]string, string) gpuFacts { return gpuFacts{Why: "no driver"} },
	})
	if exitcode.Of(err) != exitcode.Config {
		t.Errorf("status %d, want 78", exitcode.Of(err))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	var nvml map[string]json.RawMessage
	json.Unmarshal(m["nvml"], &nvml)
	for k, want := range map[string]string{"slurm": "null", "busy": "[]"} {
		if string(m[k]) != want {
			t.Errorf("%s: %s, want %s", k, m[k], want)
		}
	}
	if string(nvml["gpus"]) != "[]" {
		t.Errorf("gpus: %s", nvml["gpus"])
	}
	if !strings.Contains(string(m["allocator_problems"]), `unknown option \"expandable_segment\"`) {
		t.Errorf("allocator_problems: %s", m["allocator_problems"])
	}
	out.Reset()
	run(Options{Stdout: &out}, inputs{procRoot: "/proc", selfPID: os.Getpid(),
		gpus: func([]string, string) gpuFacts { return gpuFacts{Why: "no driver"} }})
	if !strings.Contains(out.String(), "gpuguard run works without a GPU") {
		t.Errorf("no word on run without a GPU:\n%s", out.String())
	}
}

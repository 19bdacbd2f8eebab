//go:build cgo && !nonvml

package doctor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuguard/gpuguard/internal/exitcode"
)

const gib = uint64(1) << 30

// gpuProcess starts `sleep` with extra environment; cleanup kills it.
func gpuProcess(t *testing.T, env ...string) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// orphanProcess starts a `sleep` whose parent shell exits at once, so that
// it is reparented away from this test process (to init or a subreaper).
func orphanProcess(t *testing.T, env ...string) int {
	t.Helper()
	sh := exec.Command("sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!")
	sh.Env = append(os.Environ(), env...)
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	sh.Wait() // the shell is gone: the sleep is an orphan now
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// The shell printed the pid right after the fork: wait for the exec, so
	// that doctor reads sleep's command line rather than an empty one.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(b), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d never exec'd sleep", pid)
		}
	}
	return pid
}

// goneGpuguardPID returns the pid of a process that has exited.
func goneGpuguardPID(t *testing.T) int {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// doctorMachine is a DGX A100 mock: gpu0 30 GiB used by a stale and a live
// process of gpuguard runs, an orphan, and a process NVML lists from another
// PID namespace; gpu1 2 GiB used by a process not started by gpuguard.
func doctorMachine(t *testing.T) (*server.Server, map[string]int) {
	srv := dgxa100.New()
	pids := map[string]int{
		"stale":  gpuProcess(t, fmt.Sprintf("GPUGUARD_PID=%d", goneGpuguardPID(t)), "GPUGUARD_RUN_DIR=/runs/old", "GPUGUARD_ATTEMPT=2"),
		"live":   gpuProcess(t, fmt.Sprintf("GPUGUARD_PID=%d", os.Getpid()), "GPUGUARD_RUN_DIR=/runs/now", "GPUGUARD_ATTEMPT=1"),
		"orphan": orphanProcess(t, fmt.Sprintf("GPUGUARD_PID=%d", os.Getpid()), "GPUGUARD_RUN_DIR=/runs/now", "GPUGUARD_ATTEMPT=1"),
		"other":  gpuProcess(t),
	}
	for i, d := range srv.Devices {
		d := d.(*server.Device)
		var procs []nvml.ProcessInfo
		used := uint64(0)
		switch i {
		case 0:
			used = 30 * gib
			procs = []nvml.ProcessInfo{
				{Pid: uint32(pids["stale"]), UsedGpuMemory: 12 * gib},
				{Pid: uint32(pids["live"]), UsedGpuMemory: 10 * gib},
				{Pid: uint32(pids["orphan"]), UsedGpuMemory: 6 * gib},
				{Pid: 1<<22 + 17, UsedGpuMemory: ^uint64(0)},
			}
		case 1:
			used = 2 * gib
			procs = []nvml.ProcessInfo{{Pid: uint32(pids["other"]), UsedGpuMemory: 2 * gib}}
		}
		total := d.MemoryInfo.Total
		d.MemoryInfo = nvml.Memory{Total: total, Free: total - used, Used: used}
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: total, Free: total - used, Used: used}, nvml.SUCCESS
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
	}
	return srv, pids
}

func runDoctor(t *testing.T, lib nvml.Interface, env []string, jsonOut bool) (int, string, report) {
	t.Helper()
	var out bytes.Buffer
	code := exitcode.Of(run(Options{JSON: jsonOut, Stdout: &out}, inputs{
		procRoot: "/proc", env: env, selfPID: os.Getpid(),
		gpus: func(env []string, _ string) gpuFacts { return collectNVML(lib, env) },
	}))
	var rep report
	if jsonOut {
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out.String())
		}
	}
	return code, out.String(), rep
}

func TestDoctorWithMockGPUs(t *testing.T) {
	srv, pids := doctorMachine(t)
	env := []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0", "PYTORCH_ALLOC_CONF=expandable_segments:True"}
	code, _, rep := runDoctor(t, srv, env, true)
	if code != 1 || len(rep.Busy) != 1 || !strings.Contains(rep.Busy[0], "GPU 0") {
		t.Fatalf("exit %d busy %v: gpu0 is 75%% used and the job will use it", code, rep.Busy)
	}
	n := rep.NVML
	if !n.Available || n.Driver != "550.54.15" || n.CUDADriver != "12.4" || len(n.GPUs) != 8 {
		t.Fatalf("facts %+v", n)
	}
	g0, g1 := n.GPUs[0], n.GPUs[1]
	if !g0.JobWillUse || g1.JobWillUse || g0.MIG != "disabled" || g0.UsedBytes != 30*gib || g0.UsedFrac != 0.75 {
		t.Errorf("gpu0 %+v / gpu1 %+v", g0, g1)
	}
	byPID := map[int]process{}
	for _, p := range append(g0.Processes, g1.Processes...) {
		byPID[p.PID] = p
	}
	check := func(name string, stale bool, status string) {
		t.Helper()
		p, ok := byPID[pids[name]]
		if !ok {
			t.Errorf("%s process %d not listed", name, pids[name])
			return
		}
		if p.Stale != stale || !strings.Contains(p.Status, status) || !p.Visible || p.Command == "" || p.User == "" ||
			!strings.Contains(p.Command, "sleep 600") {
			t.Errorf("%s: %+v, want stale=%v and %q", name, p, stale, status)
		}
	}
	check("stale", true, "which is gone")
	check("live", false, "live: under gpuguard")
	check("orphan", true, "orphaned")
	check("other", false, "not started by gpuguard")
	if p := byPID[pids["stale"]]; p.RunDir != "/runs/old" || p.Attempt != "2" || p.UsedBytes != 12*gib {
		t.Errorf("stale details %+v", p)
	}
	if p := byPID[1<<22+17]; p.Visible || !strings.Contains(p.Status, "not visible") || p.UsedBytes != 0 {
		t.Errorf("foreign pid %+v", p)
	}
	if rep.Env["PYTORCH_ALLOC_CONF"] != "expandable_segments:True" || rep.Env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("env %v", rep.Env)
	}

	// The text says the same, and marks the job's GPU.
	code, text, _ := runDoctor(t, srv, env, false)
	for _, want := range []string{"GPUs: driver 550.54.15, CUDA 12.4", "[job] 0  Mock NVIDIA A100-SXM4-40GB  30.00 GiB of 40.00 GiB in use (75%)",
		"stale: started by gpuguard", "PROBLEM: GPU 0", "PYTORCH_ALLOC_CONF=expandable_segments:True"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if code != 1 {
		t.Errorf("text mode exit %d", code)
	}

	// Another GPU for the job: nothing in the way.
	code, _, rep = runDoctor(t, srv, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1"}, true)
	if code != 0 || len(rep.Busy) != 0 || !rep.NVML.GPUs[1].JobWillUse {
		t.Errorf("gpu1: exit %d busy %v", code, rep.Busy)
	}
}

func TestDoctorNVMLInitFails(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	code, text, _ := runDoctor(t, lib, nil, false)
	if code != 0 || !strings.Contains(text, "GPUs: not available: NVML init failed") || !strings.Contains(text, "kernel driver is not loaded") {
		t.Errorf("exit %d:\n%s", code, text)
	}
	if len(lib.DeviceGetCountCalls())+len(lib.SystemGetDriverVersionCalls()) != 0 {
		t.Error("NVML called after a failed Init")
	}
}

func TestDoctorMIG(t *testing.T) {
	srv, _ := doctorMachine(t)
	d3 := srv.Devices[3].(*server.Device)
	d3.MigMode = nvml.DEVICE_MIG_ENABLE
	mig := &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-aaaaaaaa-1111-2222-3333-444444444444", nvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 10 * gib, Free: 2 * gib, Used: 8 * gib}, nvml.SUCCESS
		},
	}
	d3.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 1, nvml.SUCCESS }
	d3.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return mig, nvml.SUCCESS }
	code, _, rep := runDoctor(t, srv, []string{"CUDA_VISIBLE_DEVICES=MIG-aaaa"}, true)
	g3 := rep.NVML.GPUs[3]
	if g3.MIG != "enabled" || len(g3.MIGDevices) != 1 || !g3.MIGDevices[0].JobWillUse || g3.JobWillUse {
		t.Fatalf("gpu3 %+v", g3)
	}
	if code != 1 || len(rep.Busy) != 1 || !strings.Contains(rep.Busy[0], "MIG device MIG-aaaaaaaa") {
		t.Errorf("exit %d busy %v: the MIG device is 80%% used", code, rep.Busy)
	}
}

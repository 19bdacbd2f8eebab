//go:build cgo && !nonvml

package gpu

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/gpu/nvmltest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func openMock(t *testing.T, lib nvml.Interface, env []string) *nvmlGPU {
	t.Helper()
	g, err := FromNVML(lib, env, zap.NewNop())
	if err != nil {
		t.Fatalf("FromNVML: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g.(*nvmlGPU)
}

func memDeviceIDs(ds []Device) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.ID)
	}
	return strings.Join(s, ",")
}

func TestNVMLResolvesUUIDsAndSamples(t *testing.T) {
	srv := dgxa100.New()
	nvmltest.Machine(srv, []uint64{1, 2, 3, 30, 5, 22, 7, 8}, map[int][]nvml.ProcessInfo{
		3: {{Pid: 4242, UsedGpuMemory: 20 * nvmltest.GiB}, {Pid: 4243, UsedGpuMemory: 2 * nvmltest.GiB}, {Pid: 999, UsedGpuMemory: 8 * nvmltest.GiB}},
		5: {{Pid: 4242, UsedGpuMemory: 21 * nvmltest.GiB}},
	})
	u3 := srv.Devices[3].(*server.Device).UUID
	u5 := srv.Devices[5].(*server.Device).UUID
	env := []string{"CUDA_VISIBLE_DEVICES=" + u5[:12] + "," + u3}
	g := openMock(t, srv, env)

	devs := g.Devices()
	if memDeviceIDs(devs) != "gpu5,gpu3" {
		t.Fatalf("devices %s, want gpu5,gpu3 (CUDA order)", memDeviceIDs(devs))
	}
	if devs[0].CUDAOrdinal != 0 || devs[1].CUDAOrdinal != 1 || devs[0].UUID != u5 {
		t.Errorf("ordinals/UUIDs wrong: %+v", devs)
	}
	if devs[0].TotalBytes != 40*nvmltest.GiB || !strings.Contains(devs[0].Name, "A100-SXM4-40GB") {
		t.Errorf("device 5: %+v", devs[0])
	}
	got, err := g.Sample(context.Background(), []int{4242, 4243})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d samples, want 2: %+v", len(got), got)
	}
	s3 := got[1]
	if s3.ID != "gpu3" || s3.UsedBytes != 30*nvmltest.GiB || s3.TotalBytes != 40*nvmltest.GiB || s3.ReservedBytes != 512<<20 {
		t.Errorf("gpu3 sample: %+v (used must be total-free, not v2's used)", s3)
	}
	if !s3.JobKnown || s3.JobBytes != 22*nvmltest.GiB {
		t.Errorf("gpu3 job bytes: %+v, want 22 GiB (4242+4243, not 999)", s3)
	}
	if got[0].JobBytes != 21*nvmltest.GiB || got[0].UsedBytes != 22*nvmltest.GiB {
		t.Errorf("gpu5 sample: %+v", got[0])
	}
}

// TestNVMLUtilization: the samples carry NVML's utilisation rates (the
// hang watchdog's GPU signal); a device without them (NOT_SUPPORTED) is
// still measured, says so once in the log, and its rates read unknown.
func TestNVMLUtilization(t *testing.T) {
	srv := dgxa100.New()
	nvmltest.Machine(srv, []uint64{30, 30}, nil)
	nvmltest.Utilization(srv, 0, 100, 0) // a kernel spinning: NCCL waiting
	srv.Devices[1].(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	core, logs := observer.New(zap.InfoLevel)
	g, err := FromNVML(srv, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,1"}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := 0; i < 2; i++ {
		got, err := g.Sample(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !got[0].UtilKnown || got[0].GPUUtilPct != 100 || got[0].MemUtilPct != 0 {
			t.Fatalf("gpu0: %+v, want 100%% GPU, 0%% memory", got)
		}
		if got[1].UtilKnown || got[1].Lost || got[1].UsedBytes != 30*nvmltest.GiB {
			t.Fatalf("gpu1: %+v, want memory measured, utilisation unknown", got[1])
		}
	}
	if n := logs.FilterMessageSnippet("no utilisation rates").Len(); n != 1 {
		t.Errorf("the missing rates were logged %d times over 2 samples, want once: %v", n, logs.All())
	}
	nvmltest.Utilization(srv, 0, 64, 41)
	got, _ := g.Sample(context.Background(), nil)
	if got[0].GPUUtilPct != 64 || got[0].MemUtilPct != 41 {
		t.Errorf("gpu0 after a change: %+v", got[0])
	}
}

func TestNVMLIndicesWithoutPCIOrderFollowTheJobsProcesses(t *testing.T) {
	srv := dgxh100.New()
	nvmltest.Machine(srv, []uint64{70, 0, 0, 0, 0, 0, 33, 0}, map[int][]nvml.ProcessInfo{
		0: {{Pid: 777, UsedGpuMemory: 70 * nvmltest.GiB}}, // someone else's job
		6: {{Pid: 5000, UsedGpuMemory: 33 * nvmltest.GiB}},
	})
	core, logs := observer.New(zap.InfoLevel)
	g, err := FromNVML(srv, []string{"CUDA_VISIBLE_DEVICES=0"}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if logs.FilterMessage("CUDA_VISIBLE_DEVICES").Len() != 1 {
		t.Errorf("the order caveat was not logged: %v", logs.All())
	}
	if memDeviceIDs(g.Devices()) != "gpu0" {
		t.Fatalf("initial guess %s, want gpu0", memDeviceIDs(g.Devices()))
	}
	// Before the job's processes appear, the guess is reported.
	got, err := g.Sample(context.Background(), []int{5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "gpu6" || got[0].UsedBytes != 33*nvmltest.GiB || !got[0].JobKnown {
		t.Fatalf("samples %+v, want gpu6 only (where pid 5000 runs)", got)
	}
	if memDeviceIDs(g.Devices()) != "gpu6" {
		t.Errorf("devices after resolution: %s, want gpu6", memDeviceIDs(g.Devices()))
	}
	// With PCI_BUS_ID the index is trusted and nothing moves.
	g2 := openMock(t, srv, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0"})
	got, _ = g2.Sample(context.Background(), []int{5000})
	if len(got) != 1 || got[0].ID != "gpu0" || got[0].JobKnown {
		t.Errorf("PCI_BUS_ID sample %+v, want gpu0 with no job bytes", got)
	}
}

func TestNVMLLostGPU(t *testing.T) {
	srv := dgxa100.New()
	nvmltest.Machine(srv, []uint64{10, 10}, nil)
	d1 := srv.Devices[1].(*server.Device)
	lost := func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	g := openMock(t, srv, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,1"})
	d1.GetMemoryInfoFunc = lost
	d1.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST }
	got, err := g.Sample(context.Background(), nil)
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Fatalf("err = %v, want one wrapping ERROR_GPU_IS_LOST", err)
	}
	if !strings.Contains(err.Error(), "gpu1") {
		t.Errorf("error %q does not name the device", err)
	}
	if len(got) != 2 || got[0].Lost || !got[1].Lost || got[0].UsedBytes != 10*nvmltest.GiB {
		t.Errorf("samples %+v: gpu0 measured, gpu1 marked lost", got)
	}
}

func TestNVMLMissingPerProcessData(t *testing.T) {
	tests := []struct {
		description string
		procs       func() ([]nvml.ProcessInfo, nvml.Return)
		logged      string
	}{
		{"process list not supported",
			func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }, "per-process GPU memory is not available"},
		{"no permission",
			func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }, "per-process GPU memory is not available"},
		{"value not available (containers, WDDM)",
			func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: nvmlValueNotAvailable}}, nvml.SUCCESS
			}, "without their memory"},
		{"host PIDs from another PID namespace",
			func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 918273, UsedGpuMemory: 5 * nvmltest.GiB}}, nvml.SUCCESS
			}, "none of which is in the job's process tree"},
	}
	for _, tc := range tests {
		t.Run(tc.description, func(t *testing.T) {
			srv := dgxa100.New()
			nvmltest.Machine(srv, []uint64{12}, nil)
			srv.Devices[0].(*server.Device).GetComputeRunningProcessesFunc = tc.procs
			core, logs := observer.New(zap.InfoLevel)
			g, err := FromNVML(srv, []string{"CUDA_VISIBLE_DEVICES=0", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			for i := 0; i < 3; i++ {
				got, err := g.Sample(context.Background(), []int{4242})
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].JobKnown || got[0].UsedBytes != 12*nvmltest.GiB {
					t.Fatalf("sample %+v: want device figures, job unknown", got)
				}
			}
			n := 0
			for _, e := range logs.All() {
				if strings.Contains(e.Message, tc.logged) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("logged %q %d times over 3 samples, want once; logs: %v", tc.logged, n, logs.All())
			}
		})
	}
}

func TestNVMLMemoryV1WhenV2SymbolMissing(t *testing.T) {
	srv := dgxa100.New()
	nvmltest.Machine(srv, []uint64{6}, nil)
	var v2calls atomic.Int32
	d0 := srv.Devices[0].(*server.Device)
	d0.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { v2calls.Add(1); return nvml.Memory_v2{}, nvml.ERROR_UNKNOWN }
	srv.LookupSymbolFunc = func(sym string) error {
		if sym == "nvmlDeviceGetMemoryInfo_v2" {
			return errors.New("undefined symbol")
		}
		return nil
	}
	g := openMock(t, srv, []string{"CUDA_VISIBLE_DEVICES=0"})
	got, err := g.Sample(context.Background(), nil)
	if err != nil || len(got) != 1 || got[0].UsedBytes != 6*nvmltest.GiB || got[0].ReservedBytes != 0 {
		t.Fatalf("sample %+v, %v", got, err)
	}
	if v2calls.Load() != 0 {
		t.Errorf("GetMemoryInfo_v2 called %d times although its symbol is missing", v2calls.Load())
	}
}

func TestNVMLFailedInitMakesNoOtherCall(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH} {
		// A bare moq mock: any method without a Func panics, and every call
		// is recorded.
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		_, err := FromNVML(lib, nil, zap.NewNop())
		if !errors.Is(err, ret) || !strings.Contains(err.Error(), "NVML init failed") {
			t.Errorf("%v: err = %v", ret, err)
		}
		if n := len(lib.InitCalls()); n != 1 {
			t.Errorf("%v: Init called %d times", ret, n)
		}
		if len(lib.DeviceGetCountCalls())+len(lib.ShutdownCalls())+len(lib.ExtensionsCalls())+len(lib.DeviceGetHandleByIndexCalls()) != 0 {
			t.Errorf("%v: NVML was called after a failed Init", ret)
		}
	}
}

func TestNVMLInitHangIsBounded(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	lib := &mock.Interface{InitFunc: func() nvml.Return { <-release; return nvml.ERROR_UNKNOWN }}
	_, err := newNVMLGPU(lib, nil, zap.NewNop(), 50*time.Millisecond, time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not initialise") {
		t.Fatalf("err = %v, want the hang reported", err)
	}
}

func TestNVMLStuckSampleDoesNotBlock(t *testing.T) {
	srv := dgxa100.New()
	nvmltest.Machine(srv, []uint64{3}, nil)
	g0, err := newNVMLGPU(srv, []string{"CUDA_VISIBLE_DEVICES=0"}, zap.NewNop(), time.Second, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	g := g0.(*nvmlGPU)
	stuck := make(chan struct{})
	entered := make(chan struct{}, 1)
	d0 := srv.Devices[0].(*server.Device)
	good := d0.GetMemoryInfo_v2Func
	d0.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		entered <- struct{}{}
		<-stuck
		return good()
	}
	if _, err := g.Sample(context.Background(), nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("stuck sample: err = %v, want ErrTimeout", err)
	}
	<-entered
	if _, err := g.Sample(context.Background(), nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("second sample while stuck: err = %v, want ErrBusy", err)
	}
	// Unstick it; once the old call has returned, sampling works again.
	g.mu.Lock()
	fin := g.inflight
	g.mu.Unlock()
	d0.GetMemoryInfo_v2Func = good
	close(stuck)
	<-fin
	got, err := g.Sample(context.Background(), nil)
	if err != nil || len(got) != 1 || got[0].UsedBytes != 3*nvmltest.GiB {
		t.Fatalf("after recovery: %+v, %v", got, err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if len(srv.ShutdownCalls()) != 1 {
		t.Errorf("Shutdown called %d times, want 1", len(srv.ShutdownCalls()))
	}
	if err := g.Close(); err != nil || len(srv.ShutdownCalls()) != 1 {
		t.Errorf("second Close: %v, %d Shutdowns", err, len(srv.ShutdownCalls()))
	}
	if _, err := g.Sample(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Sample after Close: %v", err)
	}
}

// migDevice is a MIG device handle as NVML returns it.
func migDevice(uuid string, gi, ci int, total, used uint64, procs []nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ci, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: total, Free: total - used, Used: used}, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: total, Free: total - used, Used: used}, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
		// NVML has no utilisation rates of a MIG device.
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED },
	}
}

func TestNVMLMIGDevices(t *testing.T) {
	srv := dgxa100.New()
	nvmltest.Machine(srv, nil, nil)
	d2 := srv.Devices[2].(*server.Device)
	d2.MigMode = nvml.DEVICE_MIG_ENABLE
	migs := []nvml.Device{
		migDevice("MIG-11111111-aaaa-bbbb-cccc-000000000001", 1, 0, 10*nvmltest.GiB, 9*nvmltest.GiB, []nvml.ProcessInfo{{Pid: 31, UsedGpuMemory: 8 * nvmltest.GiB}}),
		nil, // an empty slot
		migDevice("MIG-22222222-aaaa-bbbb-cccc-000000000002", 2, 0, 20*nvmltest.GiB, 1*nvmltest.GiB, nil),
	}
	d2.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return len(migs), nvml.SUCCESS }
	d2.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if migs[i] == nil {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[i], nvml.SUCCESS
	}
	for _, env := range [][]string{
		{"CUDA_VISIBLE_DEVICES=MIG-22222222-aaaa-bbbb-cccc-000000000002"},
		{"CUDA_VISIBLE_DEVICES=MIG-2222"},
		{"CUDA_VISIBLE_DEVICES=MIG-" + d2.UUID + "/2/0"},
	} {
		g := openMock(t, srv, env)
		devs := g.Devices()
		if len(devs) != 1 || devs[0].ID != "gpu2.mig1" || !devs[0].MIG || devs[0].ParentUUID != d2.UUID || devs[0].TotalBytes != 20*nvmltest.GiB {
			t.Fatalf("%v: devices %+v", env, devs)
		}
		got, err := g.Sample(context.Background(), []int{31})
		if err != nil || len(got) != 1 || got[0].UsedBytes != 1*nvmltest.GiB || got[0].TotalBytes != 20*nvmltest.GiB || got[0].UtilKnown {
			t.Fatalf("%v: sample %+v %v", env, got, err)
		}
	}
	// Unset CUDA_VISIBLE_DEVICES: the job's process is found on the first
	// MIG device, which is preferred over its parent GPU.
	d2.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 31, UsedGpuMemory: 8 * nvmltest.GiB, GpuInstanceId: 1}}, nvml.SUCCESS
	}
	g := openMock(t, srv, nil)
	got, err := g.Sample(context.Background(), []int{31})
	if err != nil || len(got) != 1 || got[0].ID != "gpu2.mig0" || got[0].JobBytes != 8*nvmltest.GiB {
		t.Fatalf("resolution by PID on MIG: %+v %v", got, err)
	}
}

// TestRealNVML runs against the machine's driver: it skips, with the reason,
// where NVML cannot be initialised (every CI machine), and on a GPU machine
// checks the real path end to end. On a machine without a driver it also
// proves that Open calls nothing after the failed Init: the process would
// die with "symbol lookup error" otherwise.
func TestRealNVML(t *testing.T) {
	g := Open(os.Environ(), zap.NewNop())
	defer g.Close()
	ok, why := g.Available()
	if !ok {
		if why == "" {
			t.Fatal("null probe without a reason")
		}
		if g.Devices() != nil {
			t.Fatal("null probe lists devices")
		}
		if s, err := g.Sample(context.Background(), []int{os.Getpid()}); s != nil || err != nil {
			t.Fatalf("null probe sampled: %v %v", s, err)
		}
		t.Skipf("no usable NVML here, so the real-driver path is not exercised: %s", why)
	}
	devs := g.Devices()
	if len(devs) == 0 {
		t.Skip("NVML works but the job would see no GPU (CUDA_VISIBLE_DEVICES hides them)")
	}
	for _, d := range devs {
		if !strings.HasPrefix(d.UUID, "GPU-") && !strings.HasPrefix(d.UUID, "MIG-") || d.TotalBytes == 0 {
			t.Errorf("device %+v", d)
		}
	}
	got, err := g.Sample(context.Background(), []int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if s.TotalBytes == 0 || s.UsedBytes > s.TotalBytes {
			t.Errorf("sample %+v", s)
		}
		// The hang watchdog's GPU signal: a whole GPU has utilisation rates.
		mig := strings.Contains(s.ID, ".mig")
		if !mig && !s.UtilKnown || s.GPUUtilPct > 100 || s.MemUtilPct > 100 {
			t.Errorf("utilisation of %s: %+v", s.ID, s)
		}
		t.Logf("%s %s: %s used of %s; utilisation known %v: GPU %d%%, memory %d%%", s.ID, s.UUID,
			humanize.Bytes(s.UsedBytes), humanize.Bytes(s.TotalBytes), s.UtilKnown, s.GPUUtilPct, s.MemUtilPct)
	}
}

// BenchmarkRealNVMLSample is what one sample of the job's GPUs costs
// through the machine's driver (memory, utilisation, the process list), and
// the utilisation call alone: the hang watchdog's GPU signal. It skips
// where NVML cannot be initialised.
//
//	go test -run '^$' -bench RealNVML ./internal/probes/gpu/
func BenchmarkRealNVMLSample(b *testing.B) {
	g := Open(os.Environ(), zap.NewNop())
	defer g.Close()
	if ok, why := g.Available(); !ok || len(g.Devices()) == 0 {
		b.Skipf("no usable NVML GPU here: %s", why)
	}
	pids := []int{os.Getpid()}
	b.Run("sample", func(b *testing.B) {
		for range b.N {
			if _, err := g.Sample(context.Background(), pids); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("utilization", func(b *testing.B) {
		n := g.(*nvmlGPU)
		d := &n.all[n.selected[0]]
		for range b.N {
			var s Sample
			n.utilization(d, &s)
		}
	})
}

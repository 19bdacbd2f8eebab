// Package nvmltest sets up go-nvml's mock servers (pkg/nvml/mock) as a
// test's machine: memory in use per device and the processes NVML lists.
// It does not import package gpu, so that gpu's own tests can use it.
package nvmltest

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// GiB is 2^30 bytes.
const GiB = uint64(1) << 30

// Machine prepares a go-nvml mock server: device i uses used[i] GiB
// (free = total - used), NVML's v2 memory call is there, procs[i] lists
// the processes NVML shows on device i, and every device is idle (0%
// utilisation; Utilization changes it: go-nvml's mock panics on a call
// that its test did not set).
func Machine(srv *server.Server, used []uint64, procs map[int][]nvml.ProcessInfo) {
	for i, d := range srv.Devices {
		d := d.(*server.Device)
		u := uint64(0)
		if i < len(used) {
			u = used[i] * GiB
		}
		total := d.MemoryInfo.Total
		d.MemoryInfo = nvml.Memory{Total: total, Free: total - u, Used: u}
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			m := d.MemoryInfo
			// v2's "used" excludes the reserved part; gpuguard must not use it.
			return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: m.Total, Reserved: 512 << 20, Free: m.Free, Used: m.Used - min(m.Used, 512<<20)}, nvml.SUCCESS
		}
		list := procs[i]
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return list, nvml.SUCCESS }
		Utilization(srv, i, 0, 0)
	}
}

// Utilization sets device i's utilisation rates: the percent of time a
// kernel ran (gpu) and memory was read or written (mem).
func Utilization(srv *server.Server, i int, gpu, mem uint32) {
	srv.Devices[i].(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: gpu, Memory: mem}, nvml.SUCCESS
	}
}

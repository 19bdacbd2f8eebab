//go:build cgo && !nonvml

package doctor

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
)

// nvmlFacts asks the machine's NVML.
func nvmlFacts(env []string, _ string) gpuFacts { return collectNVML(nvml.New(), env) }

// collectNVML describes every GPU lib knows. It opens lib through the GPU
// probe (one Init, bounded in time; nothing else after a failed Init) to
// learn which devices CUDA_VISIBLE_DEVICES of env selects, then lists each
// GPU, its MIG devices and the processes NVML shows on it.
func collectNVML(lib nvml.Interface, env []string) (facts gpuFacts) {
	g, err := gpu.FromNVML(lib, env, nil)
	if err != nil {
		return gpuFacts{Why: err.Error()}
	}
	defer g.Close()
	defer func() {
		if r := recover(); r != nil {
			facts.Why = fmt.Sprintf("an NVML call failed inside the library binding: %v", r)
		}
	}()
	job := map[string]bool{}
	for _, d := range g.Devices() {
		job[d.UUID] = true
	}
	facts.Available = true
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		facts.Driver = v
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		facts.NVMLVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		facts.CUDADriver = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		facts.Why = fmt.Sprintf("NVML cannot count the GPUs: %v", ret)
		facts.Available = false
		return facts
	}
	for i := 0; i < n; i++ {
		dg := device{Index: i}
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			dg.Error = fmt.Sprintf("NVML cannot reach it: %v (run nvidia-smi; a lost GPU needs a reset)", ret)
			facts.GPUs = append(facts.GPUs, dg)
			continue
		}
		dg.UUID, _ = h.GetUUID()
		dg.Name, _ = h.GetName()
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			dg.TotalBytes = m.Total
			if m.Total >= m.Free {
				dg.UsedBytes = m.Total - m.Free
			}
			if m.Total > 0 {
				dg.UsedFrac = float64(dg.UsedBytes) / float64(m.Total)
			}
		} else {
			dg.Error = fmt.Sprintf("memory: %v", ret)
		}
		dg.JobWillUse = job[dg.UUID]
		if cur, _, ret := h.GetMigMode(); ret == nvml.SUCCESS {
			dg.MIG = "disabled"
			if cur == nvml.DEVICE_MIG_ENABLE {
				dg.MIG = "enabled"
				if max, ret := h.GetMaxMigDeviceCount(); ret == nvml.SUCCESS {
					for j := 0; j < max; j++ {
						mh, ret := h.GetMigDeviceHandleByIndex(j)
						if ret != nvml.SUCCESS {
							continue
						}
						var m migDevice
						m.UUID, _ = mh.GetUUID()
						if mem, ret := mh.GetMemoryInfo(); ret == nvml.SUCCESS {
							m.TotalBytes = mem.Total
							if mem.Total >= mem.Free {
								m.UsedBytes = mem.Total - mem.Free
							}
						}
						m.JobWillUse = job[m.UUID]
						dg.MIGDevices = append(dg.MIGDevices, m)
					}
				}
			}
		}
		procs, ret := h.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			if dg.Error == "" {
				dg.Error = fmt.Sprintf("NVML does not list its processes: %v", ret)
			}
		}
		for _, pi := range procs {
			p := process{PID: int(pi.Pid)}
			if pi.UsedGpuMemory != ^uint64(0) {
				p.UsedBytes = pi.UsedGpuMemory
			}
			dg.Processes = append(dg.Processes, p)
		}
		facts.GPUs = append(facts.GPUs, dg)
	}
	return facts
}

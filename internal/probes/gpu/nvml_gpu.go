//go:build cgo && !nonvml

package gpu

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"
)

// Time limits of the NVML probe. Init has hung on some drivers
// (NVIDIA/go-nvml#152) and a first query without persistence mode can take
// seconds; a call past these limits is abandoned (its goroutine stays blocked
// in the driver) and the probe degrades instead of blocking its caller.
const (
	nvmlOpenTimeout   = 20 * time.Second
	nvmlSampleTimeout = 5 * time.Second
)

// nvmlValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned value:
// what per-process memory reads in some containers and on Windows WDDM.
const nvmlValueNotAvailable = ^uint64(0)

// Open opens the real NVML library and returns a probe of the devices the
// job will use (env is the job's environment: CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER are read from it). When NVML cannot be used (no driver,
// no GPU, Init failed or hung) it returns the null probe, which says why
// through Available; the reason is logged once, at Info level. It never
// calls NVML after a failed Init. log may be nil.
func Open(env []string, log *zap.Logger) Probe {
	if log == nil {
		log = zap.NewNop()
	}
	g, err := FromNVML(nvml.New(), env, log)
	if err != nil {
		log.Info("GPU memory will not be sampled", zap.String("reason", err.Error()))
		return None(err.Error())
	}
	return g
}

// FromNVML returns a probe over lib, which may be the real library
// (nvml.New()) or a mock (go-nvml's pkg/nvml/mock/dgxa100 and friends). It
// calls lib.Init once; the probe's Close calls lib.Shutdown once. On failure
// (Init fails or does not return within 20 s, a device cannot be enumerated)
// it returns an error that says what to do, and after a failed Init it has
// made no other NVML call. Newer symbols are looked up before use
// (nvmlDeviceGetMemoryInfo_v2). log may be nil.
func FromNVML(lib nvml.Interface, env []string, log *zap.Logger) (Probe, error) {
	return newNVMLGPU(lib, env, log, nvmlOpenTimeout, nvmlSampleTimeout)
}

type nvmlGPU struct {
	lib     nvml.Interface
	log     *zap.Logger
	timeout time.Duration
	memV2   bool

	// Immutable after construction.
	all     []nvmlDev // every device of the machine (whole GPUs and MIG devices)
	visible []int     // indexes into all: the devices CUDA_VISIBLE_DEVICES names

	mu        sync.Mutex
	selected  []int // indexes into all: what Devices reports and Sample measures
	uncertain bool  // selected is a guess until the job's PIDs show up (then pinned)
	closed    bool
	inflight  chan struct{} // closed when the running NVML call returns
	warned    map[string]bool
}

type nvmlDev struct {
	dev    Device
	handle nvml.Device
}

// nvmlOpened is what the open goroutine hands back.
type nvmlOpened struct {
	g   *nvmlGPU
	err error
}

func newNVMLGPU(lib nvml.Interface, env []string, log *zap.Logger, openTimeout, sampleTimeout time.Duration) (Probe, error) {
	if log == nil {
		log = zap.NewNop()
	}
	done := make(chan nvmlOpened, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- nvmlOpened{err: fmt.Errorf("NVML: a call failed inside the library binding (%v)", r)}
			}
		}()
		g, err := openNVML(lib, env, log)
		done <- nvmlOpened{g, err}
	}()
	t := time.NewTimer(openTimeout)
	defer t.Stop()
	select {
	case o := <-done:
		if o.err != nil {
			return nil, o.err
		}
		o.g.timeout = sampleTimeout
		return o.g, nil
	case <-t.C:
		return nil, fmt.Errorf("NVML did not initialise within %s (a known driver hang; check `nvidia-smi`, "+
			"and enable persistence mode with `nvidia-smi -pm 1`); GPU memory will not be sampled", openTimeout)
	}
}

// openNVML initialises lib and enumerates the devices.
func openNVML(lib nvml.Interface, env []string, log *zap.Logger) (*nvmlGPU, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, nvmlInitError(ret)
	}
	ok := false
	defer func() {
		if !ok {
			lib.Shutdown()
		}
	}()
	g := &nvmlGPU{lib: lib, log: log, warned: map[string]bool{}}
	g.memV2 = lib.Extensions().LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: counting devices: %w", ret)
	}
	type phys struct {
		id     gpuIdentity
		handle nvml.Device
		dev    Device
		migs   []nvmlDev
		busID  string
	}
	var ps []phys
	for i := 0; i < n; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: device %d: %w (run `nvidia-smi` to see whether it is lost)", i, ret)
		}
		p := phys{handle: h}
		p.dev.Index = i
		p.dev.ID = fmt.Sprintf("gpu%d", i)
		if p.dev.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: device %d UUID: %w", i, ret)
		}
		p.dev.Name, _ = h.GetName()
		if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			p.dev.TotalBytes = mem.Total
		}
		if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			p.busID = nvmlCString(pci.BusId[:])
		}
		p.id = gpuIdentity{Index: i, UUID: p.dev.UUID, Name: p.dev.Name}
		if cur, _, ret := h.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
			max, ret := h.GetMaxMigDeviceCount()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("NVML: device %d MIG device count: %w", i, ret)
			}
			for j := 0; j < max; j++ {
				mh, ret := h.GetMigDeviceHandleByIndex(j)
				if ret != nvml.SUCCESS {
					continue // an empty slot reads ERROR_NOT_FOUND
				}
				md := Device{Index: i, Name: p.dev.Name, MIG: true, ParentUUID: p.dev.UUID,
					ID: fmt.Sprintf("gpu%d.mig%d", i, len(p.migs))}
				if md.UUID, ret = mh.GetUUID(); ret != nvml.SUCCESS {
					return nil, fmt.Errorf("NVML: device %d MIG %d UUID: %w", i, j, ret)
				}
				gi, _ := mh.GetGpuInstanceId()
				ci, _ := mh.GetComputeInstanceId()
				if mem, ret := mh.GetMemoryInfo(); ret == nvml.SUCCESS {
					md.TotalBytes = mem.Total
				}
				p.migs = append(p.migs, nvmlDev{dev: md, handle: mh})
				p.id.MIG = append(p.id.MIG, gpuMIGIdentity{UUID: md.UUID, GI: gi, CI: ci})
			}
		}
		ps = append(ps, p)
	}
	// CUDA's PCI_BUS_ID order is the PCI bus order; NVML's index order is
	// that too in practice, but sort by bus id when every device reports one.
	haveBus := len(ps) > 0
	for _, p := range ps {
		haveBus = haveBus && p.busID != ""
	}
	if haveBus {
		sort.SliceStable(ps, func(a, b int) bool { return strings.ToLower(ps[a].busID) < strings.ToLower(ps[b].busID) })
	}
	ids := make([]gpuIdentity, len(ps))
	for i, p := range ps {
		ids[i] = p.id
	}
	vis := gpuResolveVisible(env, ids)
	for _, note := range vis.Notes {
		log.Warn("CUDA_VISIBLE_DEVICES", zap.String("note", note))
	}
	// all: whole GPUs first (in order), then MIG devices; remember where.
	wholeAt := make([]int, len(ps))
	migAt := make([][]int, len(ps))
	for i, p := range ps {
		wholeAt[i] = len(g.all)
		g.all = append(g.all, nvmlDev{dev: p.dev, handle: p.handle})
	}
	for i, p := range ps {
		for _, m := range p.migs {
			migAt[i] = append(migAt[i], len(g.all))
			g.all = append(g.all, m)
		}
	}
	for _, s := range vis.Selected {
		k := wholeAt[s.Phys]
		if s.MIG >= 0 {
			k = migAt[s.Phys][s.MIG]
		}
		g.all[k].dev.CUDAOrdinal = s.Ordinal
		g.visible = append(g.visible, k)
	}
	g.selected = append([]int(nil), g.visible...)
	g.uncertain = vis.Uncertain
	ok = true
	return g, nil
}

// nvmlInitError turns a failed Init into a sentence that says what to do.
func nvmlInitError(ret nvml.Return) error {
	var why string
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		why = "libnvidia-ml.so.1 was not found: no NVIDIA driver is installed here (or the container was started without the NVIDIA runtime)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		why = "the NVIDIA kernel driver is not loaded (no GPU on this machine, or `modprobe nvidia` is needed)"
	case nvml.ERROR_NO_PERMISSION:
		why = "no permission to open the GPU device files (/dev/nvidia*)"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		why = "the NVIDIA library and kernel driver versions differ (a driver update needs a reboot)"
	default:
		why = "see `nvidia-smi` for the driver's own diagnosis"
	}
	return fmt.Errorf("NVML init failed: %w: %s", ret, why)
}

// nvmlCString reads a NUL-terminated C char array.
func nvmlCString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func (g *nvmlGPU) Available() (bool, string) { return true, "" }

func (g *nvmlGPU) Devices() []Device {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Device, len(g.selected))
	for i, k := range g.selected {
		out[i] = g.all[k].dev
	}
	return out
}

// sampleResult is one finished NVML sample.
type nvmlSampleResult struct {
	samples []Sample
	err     error
}

func (g *nvmlGPU) Sample(ctx context.Context, pids []int) ([]Sample, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	if g.inflight != nil {
		g.mu.Unlock()
		return nil, ErrBusy
	}
	fin := make(chan struct{})
	g.inflight = fin
	g.mu.Unlock()

	res := make(chan nvmlSampleResult, 1)
	go func() {
		var r nvmlSampleResult
		defer func() {
			if p := recover(); p != nil {
				r = nvmlSampleResult{err: fmt.Errorf("NVML: a call failed inside the library binding (%v)", p)}
			}
			// Free the slot before answering, so the caller's next Sample
			// does not find it busy.
			g.mu.Lock()
			g.inflight = nil
			g.mu.Unlock()
			close(fin)
			res <- r
		}()
		r.samples, r.err = g.sample(pids)
	}()
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case r := <-res:
		return r.samples, r.err
	case <-t.C:
		return nil, fmt.Errorf("GPU sample: %w (no answer within %s)", ErrTimeout, g.timeout)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("GPU sample: %w (%v)", ErrTimeout, ctx.Err())
		}
		return nil, ctx.Err()
	}
}

// sample runs in the probe's one in-flight goroutine.
func (g *nvmlGPU) sample(pids []int) ([]Sample, error) {
	g.mu.Lock()
	probeAll := g.uncertain && len(pids) > 0
	targets := g.selected
	if probeAll {
		// Look everywhere for the job's processes (whole GPUs and MIG
		// devices), report the guess until they show up.
		targets = make([]int, len(g.all))
		for i := range g.all {
			targets[i] = i
		}
	}
	g.mu.Unlock()

	pidset := make(map[uint32]bool, len(pids))
	for _, p := range pids {
		pidset[uint32(p)] = true
	}
	var errs []error
	samples := make([]Sample, 0, len(targets))
	var jobOn []int
	for _, k := range targets {
		d := &g.all[k]
		s := Sample{ID: d.dev.ID, UUID: d.dev.UUID}
		if err := g.memory(d, &s); err != nil {
			s.Lost = true
			errs = append(errs, err)
			samples = append(samples, s)
			continue
		}
		g.utilization(d, &s)
		matched := g.attribute(d, pidset, &s)
		if matched {
			jobOn = append(jobOn, k)
		}
		samples = append(samples, s)
	}
	if probeAll {
		samples = g.narrow(targets, samples, jobOn)
	}
	return samples, errors.Join(errs...)
}

// narrow keeps the samples of the selected devices, after pinning the
// selection to the devices where the job's processes were found.
func (g *nvmlGPU) narrow(targets []int, samples []Sample, jobOn []int) []Sample {
	g.mu.Lock()
	if len(jobOn) > 0 && g.uncertain {
		// Prefer MIG devices over their parent when both list the PIDs.
		var pin []int
		for _, k := range jobOn {
			if !g.all[k].dev.MIG && g.hasMIGIn(g.all[k].dev.UUID, jobOn) {
				continue
			}
			pin = append(pin, k)
		}
		g.selected = pin
		g.uncertain = false
		ids := make([]string, len(pin))
		for i, k := range pin {
			ids[i] = g.all[k].dev.ID
		}
		g.log.Info("GPU devices resolved from the job's processes", zap.Strings("devices", ids))
	}
	keep := map[int]bool{}
	for _, k := range g.selected {
		keep[k] = true
	}
	g.mu.Unlock()
	out := samples[:0]
	for i, k := range targets {
		if keep[k] {
			out = append(out, samples[i])
		}
	}
	return out
}

func (g *nvmlGPU) hasMIGIn(parent string, ks []int) bool {
	for _, k := range ks {
		if g.all[k].dev.MIG && g.all[k].dev.ParentUUID == parent {
			return true
		}
	}
	return false
}

// memory fills the device figures of s.
func (g *nvmlGPU) memory(d *nvmlDev, s *Sample) error {
	if g.memV2 {
		m, ret := d.handle.GetMemoryInfo_v2()
		if ret == nvml.SUCCESS {
			s.TotalBytes, s.ReservedBytes = m.Total, m.Reserved
			s.UsedBytes = nvmlUsed(m.Total, m.Free)
			return nil
		}
		if ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.ERROR_FUNCTION_NOT_FOUND && ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			return fmt.Errorf("%s (%s) memory: %w", d.dev.ID, d.dev.UUID, ret)
		}
		// Fall through to v1 for this call.
	}
	m, ret := d.handle.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("%s (%s) memory: %w", d.dev.ID, d.dev.UUID, ret)
	}
	s.TotalBytes = m.Total
	s.UsedBytes = nvmlUsed(m.Total, m.Free)
	return nil
}

func nvmlUsed(total, free uint64) uint64 {
	if free > total {
		return 0
	}
	return total - free
}

// utilization fills the device's utilisation rates of s, when NVML has
// them; a device that has none (MIG, ERROR_NOT_SUPPORTED) is logged once.
// A failure here is no lost device: memory answered.
func (g *nvmlGPU) utilization(d *nvmlDev, s *Sample) {
	u, ret := d.handle.GetUtilizationRates()
	if ret != nvml.SUCCESS {
		g.once(d.dev.ID+"/util", "NVML gives no utilisation rates for this device; the hang watchdog uses its memory figures only",
			zap.String("device", d.dev.ID), zap.Error(fmt.Errorf("utilisation: %w", ret)))
		return
	}
	s.UtilKnown, s.GPUUtilPct, s.MemUtilPct = true, min(u.Gpu, 100), min(u.Memory, 100)
}

// attribute fills the job's share of s from NVML's process list, and says
// whether a process of the job was found on the device. Missing data is
// logged once per device and reason.
func (g *nvmlGPU) attribute(d *nvmlDev, pidset map[uint32]bool, s *Sample) bool {
	if len(pidset) == 0 {
		return false
	}
	procs, ret := d.handle.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		g.once(d.dev.ID+"/procs", "per-process GPU memory is not available; using device figures",
			zap.String("device", d.dev.ID), zap.Error(fmt.Errorf("process list: %w", ret)))
		return false
	}
	matched, unknown := false, false
	var sum uint64
	for _, p := range procs {
		if !pidset[p.Pid] {
			continue
		}
		matched = true
		if p.UsedGpuMemory == nvmlValueNotAvailable {
			unknown = true
			continue
		}
		sum += p.UsedGpuMemory
	}
	switch {
	case matched && !unknown:
		s.JobBytes, s.JobKnown = sum, true
	case matched:
		g.once(d.dev.ID+"/na", "NVML lists the job's processes without their memory (value not available); using device figures",
			zap.String("device", d.dev.ID))
	case len(procs) > 0:
		pl := make([]uint32, 0, len(procs))
		for _, p := range procs {
			pl = append(pl, p.Pid)
		}
		g.once(d.dev.ID+"/ns", "NVML lists GPU processes none of which is in the job's process tree "+
			"(a container with its own PID namespace?); using device figures",
			zap.String("device", d.dev.ID), zap.Uint32s("nvml_pids", pl))
	}
	return matched
}

func (g *nvmlGPU) once(key, msg string, fields ...zap.Field) {
	g.mu.Lock()
	seen := g.warned[key]
	g.warned[key] = true
	g.mu.Unlock()
	if !seen {
		g.log.Info(msg, fields...)
	}
}

func (g *nvmlGPU) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	fin := g.inflight
	g.mu.Unlock()
	if fin != nil {
		t := time.NewTimer(g.timeout)
		defer t.Stop()
		select {
		case <-fin:
		case <-t.C:
			return fmt.Errorf("closing the GPU probe: an NVML call has been stuck for over %s; NVML was not shut down", g.timeout)
		}
	}
	if ret := g.lib.Shutdown(); ret != nvml.SUCCESS && ret != nvml.ERROR_UNINITIALIZED {
		return fmt.Errorf("NVML shutdown: %w", ret)
	}
	return nil
}

var _ Probe = (*nvmlGPU)(nil)

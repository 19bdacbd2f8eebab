// Package gputest provides a GPU probe for tests: devices whose memory use
// a test sets, that can be lost, and that count their samples.
package gputest

import (
	"context"
	"errors"
	"sync"

	"github.com/gpuguard/gpuguard/internal/probes/gpu"
)

// Fake is a hand-written GPU probe: devices with settable use.
type Fake struct {
	mu      sync.Mutex
	devs    []gpu.Device
	used    map[string]uint64
	util    map[string][2]uint32 // GPU and memory utilisation, in percent
	lost    map[string]bool
	samples chan struct{} // gets a value after each Sample, when not nil
	calls   int
	pids    []int
}

func NewFake(n int, total uint64) *Fake {
	f := &Fake{used: map[string]uint64{}, util: map[string][2]uint32{}, lost: map[string]bool{}}
	for i := 0; i < n; i++ {
		id := "gpu" + string(rune('0'+i))
		f.devs = append(f.devs, gpu.Device{ID: id, Index: i, UUID: "GPU-fake-" + id, TotalBytes: total, CUDAOrdinal: i})
	}
	return f
}

func (f *Fake) Set(id string, used uint64) {
	f.mu.Lock()
	f.used[id] = used
	f.mu.Unlock()
}

// SetUtil sets device id's utilisation rates: the percent of time a
// kernel ran (gpu) and memory was read or written (mem).
func (f *Fake) SetUtil(id string, gpu, mem uint32) {
	f.mu.Lock()
	f.util[id] = [2]uint32{gpu, mem}
	f.mu.Unlock()
}

func (f *Fake) Available() (bool, string) { return true, "" }
func (f *Fake) Devices() []gpu.Device     { return append([]gpu.Device(nil), f.devs...) }
func (f *Fake) Close() error              { return nil }
func (f *Fake) Sample(ctx context.Context, pids []int) ([]gpu.Sample, error) {
	f.mu.Lock()
	f.calls++
	f.pids = append(f.pids[:0], pids...)
	var out []gpu.Sample
	var err error
	for _, d := range f.devs {
		if f.lost[d.ID] {
			out = append(out, gpu.Sample{ID: d.ID, UUID: d.UUID, Lost: true})
			err = errors.New(d.ID + " lost")
			continue
		}
		out = append(out, gpu.Sample{ID: d.ID, UUID: d.UUID, UsedBytes: f.used[d.ID], TotalBytes: d.TotalBytes,
			JobBytes: f.used[d.ID] / 2, JobKnown: true,
			UtilKnown: true, GPUUtilPct: f.util[d.ID][0], MemUtilPct: f.util[d.ID][1]})
	}
	ch := f.samples
	f.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default: // the test stopped listening
		}
	}
	return out, err
}

// Lose marks device id lost (true) or back (false): its samples carry Lost
// and Sample returns an error, as NVML does for a GPU that fell off the bus.
func (f *Fake) Lose(id string, lost bool) {
	f.mu.Lock()
	f.lost[id] = lost
	f.mu.Unlock()
}

// Used returns the use set for device id.
func (f *Fake) Used(id string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used[id]
}

// Calls returns how many times Sample was called.
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Pids returns the pids of the last Sample.
func (f *Fake) Pids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.pids...)
}

// Notify makes Sample send to ch after each sample (never blocking).
func (f *Fake) Notify(ch chan struct{}) {
	f.mu.Lock()
	f.samples = ch
	f.mu.Unlock()
}

var _ gpu.Probe = (*Fake)(nil)

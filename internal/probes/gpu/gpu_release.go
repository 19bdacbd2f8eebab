package gpu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

// Defaults of WaitRelease, after NVIDIA's NVRx restarter, which waits for
// the same thing between in-job restarts.
const (
	DefaultReleaseTolerance = 512 << 20        // bytes above the baseline still counted as released
	DefaultReleaseTimeout   = 50 * time.Second // longest wait
	DefaultReleasePoll      = 2 * time.Second  // interval between samples
)

// ErrNotReleased is wrapped by the error WaitRelease returns when the
// devices still hold memory at the deadline.
var ErrNotReleased = errors.New("GPU memory was not released")

// ReleaseError says which devices still held memory when WaitRelease
// gave up. errors.Is(err, ErrNotReleased) is true for it.
type ReleaseError struct {
	Waited  time.Duration
	Holding []Holding
	// SampleErr is the last sampling error, when the devices could not be
	// measured (an NVML timeout, say); Holding may then be empty.
	SampleErr error
}

// Holding is one device that had not gone back to its baseline.
type Holding struct {
	ID            string
	UsedBytes     uint64
	BaselineBytes uint64
	Lost          bool
}

func (e *ReleaseError) Error() string {
	var parts []string
	for _, h := range e.Holding {
		if h.Lost {
			parts = append(parts, fmt.Sprintf("%s is lost (NVML cannot reach it; the GPU may need a reset)", h.ID))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s uses %s (%s before the attempt)", h.ID, humanize.Bytes(h.UsedBytes), humanize.Bytes(h.BaselineBytes)))
	}
	if len(parts) == 0 && e.SampleErr != nil {
		parts = append(parts, "the devices could not be measured: "+e.SampleErr.Error())
	}
	return fmt.Sprintf("%s after %s: %s; a process of the previous attempt may still be alive (run `gpuguard doctor` to see who holds it)",
		ErrNotReleased, e.Waited.Round(time.Second), strings.Join(parts, ", "))
}

func (e *ReleaseError) Unwrap() error { return ErrNotReleased }

// WaitRelease waits, before a relaunch, until the devices' used memory is
// back within tolerance of the baseline taken before the failed attempt
// started, so that the new attempt does not start on memory the old one
// still holds (a dying process frees device memory only when the driver has
// torn its context down, which takes seconds).
//
// devices nil means gpu.Devices(); a device without a baseline sample is not
// waited for. tolerance 0 means DefaultReleaseTolerance, timeout 0
// DefaultReleaseTimeout; it polls every DefaultReleasePoll. It returns nil at
// once for a probe that is not available (no GPU, no driver), nil when the
// memory is released, a *ReleaseError at the deadline or as soon as a
// device is lost, and ctx.Err() when ctx ends first. onWait, when not nil,
// is called once, when the first look finds memory still held, with what
// holds it and the longest wait: the caller says what it waits for.
func WaitRelease(ctx context.Context, gpu Probe, devices []Device, baseline []Sample, tolerance uint64, timeout time.Duration, onWait func(holding []Holding, timeout time.Duration)) error {
	return waitRelease(ctx, gpu, devices, baseline, tolerance, timeout, DefaultReleasePoll, onWait)
}

func waitRelease(ctx context.Context, gpu Probe, devices []Device, baseline []Sample, tolerance uint64, timeout, poll time.Duration, onWait func([]Holding, time.Duration)) error {
	if gpu == nil {
		return nil
	}
	if ok, _ := gpu.Available(); !ok {
		return nil
	}
	if devices == nil {
		devices = gpu.Devices()
	}
	if tolerance == 0 {
		tolerance = DefaultReleaseTolerance
	}
	if timeout <= 0 {
		timeout = DefaultReleaseTimeout
	}
	base := map[string]uint64{}
	for _, b := range baseline {
		if !b.Lost {
			base[b.UUID] = b.UsedBytes
		}
	}
	want := map[string]bool{}
	for _, d := range devices {
		if _, ok := base[d.UUID]; ok {
			want[d.UUID] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var last []Holding
	var lastErr error
	for {
		samples, err := gpu.Sample(ctx, nil) // a timed-out sample just counts as "not yet"
		lastErr = err
		last = last[:0]
		lost := false
		seen := 0
		for _, s := range samples {
			if !want[s.UUID] {
				continue
			}
			seen++
			b := base[s.UUID]
			switch {
			case s.Lost:
				lost = true
				last = append(last, Holding{ID: s.ID, BaselineBytes: b, Lost: true})
			case s.UsedBytes > b+tolerance:
				last = append(last, Holding{ID: s.ID, UsedBytes: s.UsedBytes, BaselineBytes: b})
			}
		}
		if lost {
			return &ReleaseError{Waited: time.Since(start), Holding: last, SampleErr: lastErr}
		}
		if seen == len(want) && len(last) == 0 {
			return nil
		}
		if onWait != nil {
			onWait(last, timeout)
			onWait = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return &ReleaseError{Waited: time.Since(start), Holding: last, SampleErr: lastErr}
		case <-tick.C:
		}
	}
}

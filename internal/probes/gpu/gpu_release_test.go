package gpu_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/gpu/gputest"
)

const memGiB = uint64(1) << 30

// memReleasingGPU frees memory step by step: each Sample lowers gpu0's use by
// step until it reaches floor.
type memReleasingGPU struct {
	*gputest.Fake
	step, floor uint64
}

func (r *memReleasingGPU) Sample(ctx context.Context, pids []int) ([]gpu.Sample, error) {
	out, err := r.Fake.Sample(ctx, pids)
	if u := r.Used("gpu0"); u > r.floor+r.step {
		r.Set("gpu0", u-r.step)
	} else {
		r.Set("gpu0", r.floor)
	}
	return out, err
}

func TestWaitGPUReleaseReleased(t *testing.T) {
	f := gputest.NewFake(2, 80*memGiB)
	f.Set("gpu0", 2*memGiB)
	f.Set("gpu1", 1*memGiB)
	baseline, _ := f.Sample(context.Background(), nil)
	f.Set("gpu0", 60*memGiB) // the dead attempt's memory, being torn down
	g := &memReleasingGPU{Fake: f, step: 20 * memGiB, floor: 2*memGiB + 100<<20}
	var announced []gpu.Holding
	calls := 0
	err := gpu.WaitReleaseEvery(context.Background(), g, nil, baseline, 0, time.Minute, time.Millisecond,
		func(h []gpu.Holding, timeout time.Duration) { announced, calls = append(announced, h...), calls+1 })
	if err != nil {
		t.Fatalf("err = %v", err)
	}
	if calls != 1 || len(announced) != 1 || announced[0].ID != "gpu0" || announced[0].UsedBytes != 60*memGiB {
		t.Errorf("the wait was announced %d times, with %+v; want once, gpu0 at 60 GiB", calls, announced)
	}
	if f.Calls() != 1+4 { // baseline, then 60 -> 40 -> 20 -> 2.1 (within 512 MiB): the 4th sample is released
		t.Errorf("sampled %d times", f.Calls())
	}
}

func TestWaitGPUReleaseTimeout(t *testing.T) {
	f := gputest.NewFake(2, 80*memGiB)
	f.Set("gpu0", 2*memGiB)
	baseline, _ := f.Sample(context.Background(), nil)
	f.Set("gpu0", 30*memGiB) // an orphaned worker keeps it
	err := gpu.WaitReleaseEvery(context.Background(), f, nil, baseline, 0, 20*time.Millisecond, time.Millisecond, nil)
	var re *gpu.ReleaseError
	if !errors.Is(err, gpu.ErrNotReleased) || !errors.As(err, &re) {
		t.Fatalf("err = %v", err)
	}
	if len(re.Holding) != 1 || re.Holding[0].ID != "gpu0" || re.Holding[0].UsedBytes != 30*memGiB || re.Holding[0].BaselineBytes != 2*memGiB {
		t.Errorf("holdings %+v", re.Holding)
	}
	if !strings.Contains(err.Error(), "gpu0 uses 30.00 GiB (2.00 GiB before the attempt)") || !strings.Contains(err.Error(), "gpuguard doctor") {
		t.Errorf("message %q", err)
	}
}

func TestWaitGPUReleaseLostAndCancelAndNull(t *testing.T) {
	f := gputest.NewFake(1, 80*memGiB)
	baseline, _ := f.Sample(context.Background(), nil)
	f.Lose("gpu0", true)
	err := gpu.WaitReleaseEvery(context.Background(), f, nil, baseline, 0, time.Hour, time.Hour, nil)
	var re *gpu.ReleaseError
	if !errors.As(err, &re) || !re.Holding[0].Lost || !strings.Contains(err.Error(), "is lost") {
		t.Errorf("lost GPU: %v", err)
	}
	f.Lose("gpu0", false)
	f.Set("gpu0", 50*memGiB)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := gpu.WaitReleaseEvery(ctx, f, nil, baseline, 0, time.Hour, time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	// The null probe returns at once, whatever the baseline says.
	if err := gpu.WaitRelease(context.Background(), gpu.None("no driver"), nil, baseline, 0, time.Hour, nil); err != nil {
		t.Errorf("null probe: %v", err)
	}
	// A device without a baseline is not waited for.
	if err := gpu.WaitRelease(context.Background(), f, nil, nil, 0, time.Hour, nil); err != nil {
		t.Errorf("no baseline: %v", err)
	}
}

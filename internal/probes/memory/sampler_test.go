package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/gpu/gputest"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

const memGiB = uint64(1) << 30

// memClock is an injected clock.
type memClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *memClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *memClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var memT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// memStartSleep starts a real child to sample; cleanup kills and reaps it.
func memStartSleep(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func TestSamplerRates(t *testing.T) {
	c := &memClock{t: memT0}
	s := NewSampler(SamplerConfig{Now: c.Now})
	if d := s.interval(c.Now()); d != time.Second {
		t.Errorf("base interval %v, want 1s", d)
	}
	s.SetPhase(classify.PhaseTrain, 1)
	if d := s.interval(c.Now()); d != 50*time.Millisecond {
		t.Errorf("right after a phase change: %v, want 50ms (20 Hz)", d)
	}
	c.Add(DefaultFastFor)
	if d := s.interval(c.Now()); d != time.Second {
		t.Errorf("%v after the change: %v, want 1s", DefaultFastFor, d)
	}
	s.SetPhase(classify.PhaseVal, -1)
	c.Add(time.Hour)
	if d := s.interval(c.Now()); d != 50*time.Millisecond {
		t.Errorf("in validation: %v, want 50ms all along", d)
	}
	s2 := NewSampler(SamplerConfig{Now: c.Now, BaseHz: 2, FastHz: 100, FastFor: time.Second})
	s2.SetPhase(classify.PhaseTrain, -1)
	if d := s2.interval(c.Now()); d != 10*time.Millisecond {
		t.Errorf("policy fast rate: %v", d)
	}
	c.Add(time.Second)
	if d := s2.interval(c.Now()); d != 500*time.Millisecond {
		t.Errorf("policy base rate: %v", d)
	}
}

func TestSamplerPeaksTimelineAndValWarning(t *testing.T) {
	pid := memStartSleep(t)
	c := &memClock{t: memT0}
	gpu := gputest.NewFake(2, 40*memGiB)
	var tl bytes.Buffer
	var warns []Warning
	s := NewSampler(SamplerConfig{GPU: gpu, Timeline: &tl, Attempt: 2, Now: c.Now, Origin: memT0.Add(-time.Minute),
		OnWarning: func(w Warning) { warns = append(warns, w) }})
	ctx := context.Background()
	step := func(d time.Duration, used0, used1 uint64) {
		gpu.Set("gpu0", used0*memGiB)
		gpu.Set("gpu1", used1*memGiB)
		s.tick(ctx, pid)
		c.Add(d)
	}
	step(time.Second, 1, 1) // before any phase marker
	s.SetPhase(classify.PhaseTrain, 0)
	for i := 0; i < 5; i++ {
		step(time.Second, 20, 21)
	}
	s.SetPhase(classify.PhaseVal, -1)
	step(50*time.Millisecond, 30, 22)
	step(50*time.Millisecond, 38, 22) // 95%: the warning line
	step(50*time.Millisecond, 39, 23)
	step(50*time.Millisecond, 25, 22)
	s.SetPhase(classify.PhaseTrain, 1)
	step(time.Second, 20, 21)

	sum := s.Summary()
	if sum.Attempt != 2 || sum.Samples != 11 || !sum.Origin.Equal(memT0.Add(-time.Minute)) {
		t.Errorf("summary header %+v", sum)
	}
	if len(sum.Phases) != 3 || sum.Phases[0].Phase != classify.PhaseTrain || sum.Phases[1].Phase != classify.PhaseVal || sum.Phases[2].Phase != classify.PhaseNone {
		t.Fatalf("phases %+v, want train, val, none", sum.Phases)
	}
	val, _ := sum.Phase(classify.PhaseVal)
	if val.Samples != 4 || len(val.GPU) != 2 || val.GPU[0].PeakBytes != 39*memGiB || val.GPU[0].HeadroomBytes != 1*memGiB ||
		val.GPU[0].CapacityBytes != 40*memGiB || val.GPU[1].PeakBytes != 23*memGiB || val.GPU[0].PeakJobBytes != 39*memGiB/2 {
		t.Errorf("val peaks %+v", val)
	}
	if got := sum.PeakFraction(classify.PhaseVal); got != 39.0/40 {
		t.Errorf("PeakFraction(val) = %v, want %v", got, 39.0/40)
	}
	if got := sum.PeakFraction(classify.PhaseTrain); got != 21.0/40 {
		t.Errorf("PeakFraction(train) = %v", got)
	}
	// What was in use at each phase's first sample, the larger GPU's: the
	// fit action's fixed part. Training's second run does not replace it.
	if got := sum.StartFraction(classify.PhaseTrain); got != 21.0/40 {
		t.Errorf("StartFraction(train) = %v, want %v", got, 21.0/40)
	}
	if got := sum.StartFraction(classify.PhaseVal); got != 30.0/40 {
		t.Errorf("StartFraction(val) = %v, want %v", got, 30.0/40)
	}
	if sum.PeakFraction("test") != 0 || sum.MaxPeakFraction() != 39.0/40 {
		t.Errorf("PeakFraction(unsampled) / Max wrong")
	}
	// The peak's time: the third validation sample.
	if want := (time.Minute + 6*time.Second + 100*time.Millisecond).Milliseconds(); val.GPU[0].PeakMs != want {
		t.Errorf("peak at %d ms, want %d", val.GPU[0].PeakMs, want)
	}
	if val.HostPeakBytes == 0 || val.HostLimitBytes == 0 || val.RAMTotalBytes == 0 || val.HostPeakFraction <= 0 {
		t.Errorf("host figures missing: %+v", val)
	}
	// One warning for gpu0 in this validation run, none for gpu1.
	if len(warns) != 1 || warns[0].Kind != WarnValPeak || warns[0].Device != "gpu0" || warns[0].UsedBytes != 38*memGiB ||
		warns[0].Attempt != 2 || warns[0].Epoch != 0 || !strings.Contains(warns[0].Message, "within 5% of capacity") {
		t.Errorf("warnings %+v", warns)
	}
	// Summary survives a JSON round trip (the "memory" event).
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || back.PeakFraction(classify.PhaseVal) != sum.PeakFraction(classify.PhaseVal) {
		t.Errorf("JSON round trip: %v %s", err, b)
	}

	// The timeline: per sample 2 GPU rows, host, ram (and cgroup when limited).
	var rows []TimelineRow
	if err := ReadTimeline(bytes.NewReader(tl.Bytes()), func(r TimelineRow) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	perSample := map[int64]int{}
	devs := map[string]bool{}
	for _, r := range rows {
		perSample[r.ElapsedMs]++
		devs[r.Device] = true
		if r.Attempt != 2 {
			t.Fatalf("row %+v", r)
		}
	}
	if len(perSample) != 11 {
		t.Errorf("%d distinct sample times, want 11", len(perSample))
	}
	if !devs["gpu0"] || !devs["gpu1"] || !devs["host"] || !devs["ram"] {
		t.Errorf("devices in timeline: %v", devs)
	}
	first := rows[0]
	if first.ElapsedMs != 60000 || first.Phase != classify.PhaseNone || first.Device != "gpu0" || first.UsedBytes != memGiB ||
		first.LimitBytes != 40*memGiB || !first.JobKnown || first.JobBytes != memGiB/2 {
		t.Errorf("first row %+v", first)
	}
	var peakRow TimelineRow
	for _, r := range rows {
		if r.Device == "gpu0" && r.UsedBytes > peakRow.UsedBytes {
			peakRow = r
		}
	}
	if peakRow.Phase != classify.PhaseVal || peakRow.ElapsedMs != val.GPU[0].PeakMs {
		t.Errorf("timeline peak row %+v", peakRow)
	}
	// The GPU probe got the job's tree.
	if len(gpu.Pids()) == 0 || gpu.Pids()[0] != pid {
		t.Errorf("GPU sampled with pids %v, want the tree of %d", gpu.Pids(), pid)
	}
}

// record feeds synthetic samples (for trend tests that need no /proc).
func memRecordSynthetic(s *Sampler, c *memClock, gpuUsed uint64, host uint64) {
	gs := []gpu.Sample{{ID: "gpu0", UUID: "GPU-x", UsedBytes: gpuUsed, TotalBytes: 40 * memGiB}}
	hs := procfs.HostSample{RSSBytes: host, PSSBytes: host, MemTotalBytes: 64 * memGiB, MemAvailableBytes: 32 * memGiB}
	s.record(c.Now(), hs, gs, hs.TreeBytes())
	c.Add(100 * time.Millisecond)
}

func TestSamplerLeakTrend(t *testing.T) {
	c := &memClock{t: memT0}
	var warns []Warning
	s := NewSampler(SamplerConfig{Now: c.Now, Attempt: 1, OnWarning: func(w Warning) { warns = append(warns, w) }})
	for epoch := int64(1); epoch <= 4; epoch++ {
		s.SetPhase(classify.PhaseTrain, epoch)
		memRecordSynthetic(s, c, 10*memGiB, 4*memGiB)
		s.SetPhase(classify.PhaseVal, -1) // validation of this epoch
		memRecordSynthetic(s, c, 15*memGiB, 4*memGiB)
		memRecordSynthetic(s, c, (19+uint64(epoch))*memGiB, 4*memGiB) // peaks 20, 21, 22, 23 GiB
		memRecordSynthetic(s, c, 15*memGiB, 4*memGiB)
	}
	s.SetPhase(classify.PhaseTrain, 5) // ends epoch 4's validation
	var leaks []Warning
	for _, w := range warns {
		if w.Kind == WarnLeakTrend {
			leaks = append(leaks, w)
		}
	}
	// Epoch 3 completes the first streak of 3; epoch 4 extends it.
	if len(leaks) != 2 {
		t.Fatalf("leak warnings %+v, want 2 (after epochs 3 and 4)", leaks)
	}
	w := leaks[1]
	if w.Phase != classify.PhaseVal || w.Device != "gpu0" || w.Epoch != 4 || w.GrowthPerEpochBytes != memGiB || w.UsedBytes != 23*memGiB ||
		w.LimitBytes != 40*memGiB || w.FailEpoch != 4+17 || len(w.TrendEpochs) != 4 || w.TrendEpochs[0] != 1 {
		t.Errorf("leak warning %+v", w)
	}
	if !strings.Contains(w.Message, "at epoch 21") || !strings.Contains(w.Message, "1.00 GiB per epoch") {
		t.Errorf("message %q", w.Message)
	}
	if leaks[0].Epoch != 3 || leaks[0].FailEpoch != 3+18 {
		t.Errorf("first leak warning %+v", leaks[0])
	}
	// Training peaks stayed flat: no warning for train, none for the host.
	for _, w := range leaks {
		if w.Phase == classify.PhaseTrain || w.Device == "host" {
			t.Errorf("unexpected %+v", w)
		}
	}
}

func TestSamplerNoLeakOnFlatOrNoisyPeaks(t *testing.T) {
	c := &memClock{t: memT0}
	var warns []Warning
	s := NewSampler(SamplerConfig{Now: c.Now, OnWarning: func(w Warning) { warns = append(warns, w) }})
	// Validation runs without epoch numbers; peaks wobble by less than the
	// minimum rise, then fall back.
	peaks := []uint64{20 * memGiB, 20*memGiB + 4<<20, 20*memGiB + 8<<20, 20*memGiB + 12<<20, 19 * memGiB, 20 * memGiB}
	for _, p := range peaks {
		s.SetPhase(classify.PhaseTrain, -1)
		memRecordSynthetic(s, c, 10*memGiB, 4*memGiB)
		s.SetPhase(classify.PhaseVal, -1)
		memRecordSynthetic(s, c, p, 4*memGiB)
	}
	s.SetPhase(classify.PhaseTrain, -1)
	for _, w := range warns {
		if w.Kind == WarnLeakTrend {
			t.Errorf("unexpected leak warning: %+v", w)
		}
	}
}

func TestSamplerHostLeakWithoutEpochs(t *testing.T) {
	c := &memClock{t: memT0}
	var warns []Warning
	s := NewSampler(SamplerConfig{Now: c.Now, OnWarning: func(w Warning) { warns = append(warns, w) }})
	for i := uint64(0); i < 3; i++ {
		s.SetPhase(classify.PhaseVal, -1)
		memRecordSynthetic(s, c, 10*memGiB, (8+4*i)*memGiB) // host peaks 8, 12, 16 GiB of 64
		s.SetPhase(classify.PhaseTrain, -1)
		memRecordSynthetic(s, c, 10*memGiB, 4*memGiB)
	}
	var got *Warning
	for i := range warns {
		if warns[i].Kind == WarnLeakTrend && warns[i].Device == "host" {
			got = &warns[i]
		}
	}
	if got == nil {
		t.Fatalf("no host leak warning in %+v", warns)
	}
	// Run numbers stand in for epochs: runs 1-3, 4 GiB per run; 64 GiB is
	// reached after 12 more runs.
	if got.Epoch != -1 || got.GrowthPerEpochBytes != 4*memGiB || got.FailEpoch != 3+12 || !strings.Contains(got.Message, "val run") {
		t.Errorf("%+v", got)
	}
}

func TestSamplerHostWarningsFromCgroup(t *testing.T) {
	c := &memClock{t: memT0}
	var warns []Warning
	var tl bytes.Buffer
	s := NewSampler(SamplerConfig{ProcRoot: "../procfs/testdata/cgroup/v2/proc", Now: c.Now, Timeline: &tl,
		OnWarning: func(w Warning) { warns = append(warns, w) }})
	for i := 0; i < 3; i++ {
		s.tick(context.Background(), 4242)
		c.Add(time.Second)
	}
	// The fixture's working set is 8.275 GB of an 8 GiB limit (96%); RAM is
	// half used. One warning, not one per sample.
	if len(warns) != 1 || warns[0].Kind != WarnHostMemory || warns[0].Device != "cgroup" || warns[0].LimitBytes != 8589934592 ||
		!strings.Contains(warns[0].Message, "memory cgroup's limit") {
		t.Fatalf("warnings %+v", warns)
	}
	sum := s.Summary()
	none, _ := sum.Phase(classify.PhaseNone)
	if none.CgroupLimitBytes != 8589934592 || none.CgroupPeakBytes != 8275000000 || none.HostLimitBytes != 8589934592 {
		t.Errorf("summary %+v", none)
	}
	if !strings.Contains(tl.String(), ",cgroup,8275000000,8589934592,\n") {
		t.Errorf("timeline has no cgroup row:\n%s", tl.String())
	}
	if sum.GPUUnavailable == "" {
		t.Error("no GPU: the summary must say why")
	}
}

func TestSamplerRunWakesOnPhaseChange(t *testing.T) {
	pid := memStartSleep(t)
	gpu := gputest.NewFake(1, 40*memGiB)
	samples := make(chan struct{}, 64)
	gpu.Notify(samples)
	s := NewSampler(SamplerConfig{GPU: gpu, BaseHz: 0.001}) // base rate: one sample per 1000 s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var root sync.Mutex
	rootPID := 0
	go func() {
		s.Run(ctx, func() int { root.Lock(); defer root.Unlock(); return rootPID })
		close(done)
	}()
	// No root yet: nothing is sampled. Give it one.
	root.Lock()
	rootPID = pid
	root.Unlock()
	s.SetPhase(classify.PhaseTrain, 0) // wakes Run: samples now, then fast for 5 s
	<-samples
	<-samples // the fast rate goes on
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Summary(); s.SetPhase(classify.PhaseVal, -1) }()
	}
	wg.Wait()
	<-samples
	cancel()
	<-done
	if s.Summary().Samples < 3 {
		t.Errorf("samples: %d", s.Summary().Samples)
	}
}

func TestSamplerTimelineWriteErrorKeepsSampling(t *testing.T) {
	pid := memStartSleep(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "tl.csv"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // writes fail from now on
	s := NewSampler(SamplerConfig{GPU: gputest.NewFake(1, memGiB), Timeline: f})
	s.tick(context.Background(), pid)
	s.tick(context.Background(), pid)
	if s.Summary().Samples != 2 || !s.timelineErr {
		t.Errorf("samples %d, timelineErr %v", s.Summary().Samples, s.timelineErr)
	}
}

func TestSamplerGoneRootAndLostGPU(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gpu := gputest.NewFake(2, 40*memGiB)
	s := NewSampler(SamplerConfig{GPU: gpu})
	s.tick(context.Background(), cmd.Process.Pid)
	if s.Summary().Samples != 0 {
		t.Error("a gone root was sampled")
	}
	pid := memStartSleep(t)
	gpu.Lose("gpu1", true)
	gpu.Set("gpu0", 5*memGiB)
	s.tick(context.Background(), pid)
	sum := s.Summary()
	ps, _ := sum.Phase(classify.PhaseNone)
	if sum.Samples != 1 || len(ps.GPU) != 1 || ps.GPU[0].ID != "gpu0" {
		t.Errorf("lost GPU handling: %+v", ps)
	}
}

func TestOpenTimelineWritesTheHeaderOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), TimelineFile)
	for attempt := 1; attempt <= 2; attempt++ {
		f, err := OpenTimeline(path)
		if err != nil {
			t.Fatal(err)
		}
		s := NewSampler(SamplerConfig{GPU: gputest.NewFake(1, memGiB), Timeline: f, Attempt: attempt})
		s.record(time.Now(), procfs.HostSample{RSSBytes: 1, MemTotalBytes: 2}, nil, 1)
		f.Close()
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), TimelineHeader) != 1 || !strings.HasPrefix(string(b), TimelineHeader+"\n") {
		t.Errorf("timeline:\n%s", b)
	}
	n := 0
	if err := ReadTimeline(bytes.NewReader(b), func(r TimelineRow) error { n++; return nil }); err != nil || n != 4 {
		t.Errorf("rows %d err %v", n, err)
	}
}

func TestReadTimelineErrors(t *testing.T) {
	good := TimelineHeader + "\n10,1,train,gpu0,5,10,\n"
	if err := ReadTimeline(strings.NewReader(good+"20,1,train,gpu0,5,1"), func(TimelineRow) error { return nil }); err != nil {
		t.Errorf("a truncated last line must be skipped: %v", err)
	}
	err := ReadTimeline(strings.NewReader(good+"x,1,train,gpu0,5,10,\n30,1,val,gpu0,1,1,\n"), func(TimelineRow) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("err = %v, want one naming line 3", err)
	}
}

// TestSamplerMemoryBounded drives an hour of 10 Hz sampling with epochs and
// validation runs through the bookkeeping and checks that the heap does not
// grow with the number of samples (the timeline goes to a writer, not to
// memory). The 24-hour figure is measured by BenchmarkSampler24h.
func TestSamplerMemoryBounded(t *testing.T) {
	c := &memClock{t: memT0}
	s := NewSampler(SamplerConfig{Now: c.Now, Timeline: memDiscard{}, OnWarning: func(Warning) {}})
	run := func(n int) {
		for i := 0; i < n; i++ {
			if i%3000 == 0 {
				s.SetPhase(classify.PhaseTrain, int64(i/3000))
			}
			if i%3000 == 2700 {
				s.SetPhase(classify.PhaseVal, -1)
			}
			memRecordSynthetic(s, c, uint64(10+i%7)*memGiB, uint64(4+i%5)*memGiB)
		}
	}
	run(3000) // warm up maps and buffers
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run(36000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if growth > 256<<10 {
		t.Errorf("heap grew by %d bytes over 36000 samples", growth)
	}
	if n := len(s.hist[classify.PhaseVal]); n > leakHistory {
		t.Errorf("history holds %d runs", n)
	}
}

type memDiscard struct{}

func (memDiscard) Write(b []byte) (int, error) { return len(b), nil }

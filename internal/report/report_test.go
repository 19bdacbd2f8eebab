package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

const gib = uint64(1) << 30

func runReport(t *testing.T, o Options) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	o.Stdout, o.Stderr = &out, &errb
	err := Command(o)
	if err != nil && !exitcode.Silent(err) {
		fmt.Fprintf(&errb, "gpuguard report: %v\n", err) // as the command line prints it
	}
	return exitcode.Of(err), out.String(), errb.String()
}

// TestReportFixtureText reads testdata/run-oom (written by
// testdata/gen_fixture.py): a validation OOM, a host OOM, then success.
func TestReportFixtureText(t *testing.T) {
	code, out, errs := runReport(t, Options{RunDir: "testdata/run-oom"})
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"command:  torchrun --nproc-per-node=2 train.py --config configs/seg.yaml --batch-size 32",
		"exit status 0 after 3 attempt(s)",
		"settings:   batch_size=32 val_crop_size=1024 workers=8",
		"env:        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
		"verdict:    gpu_oom in val: CUDA out of memory (rank 0) at line 1507, tried to allocate 2.25 GiB with 1.12 GiB free",
		"val     gpu0       39.98 GiB of 40.00 GiB  100.0%  headroom 19.7 MiB",
		"decision:   relaunch (rule val-oom, step 1): val_crop_size 1024 → 768;",
		"from outputs/ckpt/epoch_002.pt",
		"resumed:    from outputs/ckpt/epoch_002.pt",
		"verdict:    host_oom in train: DataLoader worker killed at line 2210",
		"(8 DataLoader-like workers)",
		"cgroup     63.36 GiB of 64.00 GiB   99.0%",
		"warning:    validation uses 37.90 GiB",
		"decision:   relaunch (rule host-oom, step 1): workers 8 → 4",
		"verdict:    no failure",
		"memory peaks (from timeline.csv)", // attempt 3 has no memory event
		"decision:   done; the job exited 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", out)
	}
}

func TestReportFixtureJSON(t *testing.T) {
	code, out, _ := runReport(t, Options{RunDir: "testdata/run-oom", JSON: true})
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var run Run
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(run.Attempts) != 3 || run.ExitCode == nil || *run.ExitCode != 0 || run.Timeline != "timeline.csv" {
		t.Fatalf("run %+v", run)
	}
	a1, a3 := run.Attempts[0], run.Attempts[2]
	if a1.Verdict == nil || a1.Verdict.Kind != classify.KindGPUOOM || a1.Verdict.Phase != classify.PhaseVal || a1.MemoryFrom != "events" {
		t.Errorf("attempt 1: %+v", a1)
	}
	if got := a1.Memory.PeakFraction(classify.PhaseVal); got < 0.999 || got > 1 {
		t.Errorf("attempt 1 val peak fraction %v", got)
	}
	if a1.Decision == nil || a1.Decision.Verb != "relaunch" || len(a1.Decision.Changes) != 1 || a1.Decision.Changes[0].Name != "val_crop_size" {
		t.Errorf("attempt 1 decision %+v", a1.Decision)
	}
	if a3.MemoryFrom != "timeline" || a3.Memory == nil {
		t.Fatalf("attempt 3 memory: %+v", a3)
	}
	if got := a3.Memory.PeakFraction(classify.PhaseVal); got < 0.947 || got > 0.948 {
		t.Errorf("attempt 3 val peak fraction from the timeline: %v, want 37.9/40", got)
	}
	val, _ := a3.Memory.Phase(classify.PhaseVal)
	if len(val.GPU) != 2 || val.GPU[0].ID != "gpu0" || val.CgroupLimitBytes != 64*gib || val.HostLimitBytes != 64*gib {
		t.Errorf("attempt 3 val summary %+v", val)
	}
}

func TestReportPlotPNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	pngPath := filepath.Join(dir, "mem.png")
	code, _, errs := runReport(t, Options{RunDir: "testdata/run-oom", Plot: pngPath})
	if code != 0 || !strings.Contains(errs, "memory plot written to "+pngPath) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 600 {
		t.Errorf("image %v is too small for two panels", b)
	}
	// The OOM markers (red) and the validation shading (translucent orange
	// over white) must be drawn.
	if n := countColor(img, func(r, g, b uint8) bool { return r > 190 && g < 70 && b < 70 }); n < 100 {
		t.Errorf("%d red pixels: OOM markers missing", n)
	}
	if n := countColor(img, func(r, g, b uint8) bool { return r > 250 && g > 225 && g < 248 && b > 180 && b < 215 }); n < 10000 {
		t.Errorf("%d shaded pixels: validation shading missing", n)
	}
	// The waits between attempts: grey over white. The grid and the text
	// hold about 3,400 such pixels; the fixture's two waits add about 1,450.
	if n := countColor(img, func(r, g, b uint8) bool { return r == g && g == b && r > 220 && r < 235 }); n < 4100 {
		t.Errorf("%d grey pixels: the waits between attempts are not shown", n)
	}

	svgPath := filepath.Join(dir, "mem.SVG")
	if code, _, errs := runReport(t, Options{RunDir: "testdata/run-oom", Plot: svgPath}); code != 0 {
		t.Fatalf("svg: exit %d %s", code, errs)
	}
	svg, _ := os.ReadFile(svgPath)
	for _, want := range []string{"<svg", "validation", "gpu0", "GPU capacity 40.00 GiB", "attempt 2", "gpu_oom", "host_oom", "cgroup working set"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("svg lacks %q", want)
		}
	}
}

func countColor(img image.Image, match func(r, g, b uint8) bool) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if match(uint8(r>>8), uint8(g>>8), uint8(bl>>8)) {
				n++
			}
		}
	}
	return n
}

func TestReportErrors(t *testing.T) {
	dir := t.TempDir()
	code, _, errs := runReport(t, Options{RunDir: filepath.Join(dir, "nope")})
	if code != 66 || !strings.Contains(errs, "nope does not exist") {
		t.Errorf("missing dir: %d %q", code, errs)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if code, _, errs := runReport(t, Options{RunDir: file}); code != 66 || !strings.Contains(errs, "not a directory") {
		t.Errorf("file: %d %q", code, errs)
	}
	if code, _, errs := runReport(t, Options{RunDir: dir}); code != 66 || !strings.Contains(errs, "has no events.jsonl") {
		t.Errorf("no events: %d %q", code, errs)
	}
	os.WriteFile(filepath.Join(dir, record.Events), []byte("\n\n"), 0o644)
	if code, _, errs := runReport(t, Options{RunDir: dir}); code != 65 || !strings.Contains(errs, "no event") {
		t.Errorf("empty events: %d %q", code, errs)
	}
	if code, _, errs := runReport(t, Options{RunDir: "testdata/run-oom", Plot: filepath.Join(dir, "x.jpg")}); code != 64 || !strings.Contains(errs, ".png or .svg") {
		t.Errorf("bad extension: %d %q", code, errs)
	}
	if code, _, errs := runReport(t, Options{RunDir: "testdata/run-oom", Plot: filepath.Join(dir, "no", "such", "x.png")}); code != 73 {
		t.Errorf("unwritable plot: %d %q", code, errs)
	}
	// Events but no timeline: the text report works, the plot cannot.
	os.WriteFile(filepath.Join(dir, record.Events), []byte(`{"time":"2026-03-01T09:00:00Z","type":"run_start","argv":["python","t.py"]}`+"\n"), 0o644)
	code, out, errs := runReport(t, Options{RunDir: dir, Plot: filepath.Join(dir, "x.png")})
	if code != 66 || !strings.Contains(errs, "no memory timeline") || !strings.Contains(out, "command:  python t.py") {
		t.Errorf("no timeline: %d %q %q", code, errs, out)
	}
}

// TestReportSkipsBadLines: a crash can leave a truncated last line, and
// other writers may add lines of their own.
func TestReportSkipsBadLines(t *testing.T) {
	dir := t.TempDir()
	ev := strings.Join([]string{
		`{"time":"2026-03-01T09:00:00Z","type":"run_start","argv":["python","t.py"],"policy":{"preset":"lightning"}}`,
		`{"time":"2026-03-01T09:00:01Z","type":"attempt_start","attempt":1,"knobs":{"batch_size":"64"}}`,
		`{"time":"2026-03-01T09:00:02Z","type":"something_new","attempt":1,"x":[1,2]}`,
		`not json`,
		`{"time":"2026-03-01T09:01:01Z","type":"attempt_end","attempt":1,"exit_code":137,"signal":"SIGKILL","duration_s":"60"}`,
		`{"time":"2026-03-01T09:01:02Z","type":"attempt_end","attem`,
	}, "\n")
	os.WriteFile(filepath.Join(dir, record.Events), []byte(ev), 0o644)
	code, out, errs := runReport(t, Options{RunDir: dir})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Count(errs, "skipped events.jsonl line") != 2 || !strings.Contains(errs, "line 4") || !strings.Contains(errs, "line 6") {
		t.Errorf("stderr %q", errs)
	}
	for _, want := range []string{`policy:   {"preset":"lightning"}`, "settings:   batch_size=64", "killed by SIGKILL (exit 137)", "(1m0s)",
		"no run_end event"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// fakeGPU is a GPU probe with settable use, for a run recorded by the real
// Sampler.
type fakeGPU struct{ used []uint64 }

func (f *fakeGPU) Available() (bool, string) { return true, "" }
func (f *fakeGPU) Devices() []gpu.Device {
	var ds []gpu.Device
	for i := range f.used {
		ds = append(ds, gpu.Device{ID: "gpu" + string(rune('0'+i)), Index: i, UUID: "GPU-fake-" + string(rune('0'+i)), TotalBytes: 24 * gib})
	}
	return ds
}
func (f *fakeGPU) Close() error { return nil }
func (f *fakeGPU) Sample(_ context.Context, _ []int) ([]gpu.Sample, error) {
	var out []gpu.Sample
	for i, d := range f.Devices() {
		out = append(out, gpu.Sample{ID: d.ID, UUID: d.UUID, UsedBytes: f.used[i], TotalBytes: d.TotalBytes})
	}
	return out, nil
}

// TestReportOfASamplerRecordedRun records a run with the real Sampler
// (a real child process, a fake GPU, an injected clock), writes the events
// the supervisor would, and reports on it: the peaks must be the sampler's.
func TestReportOfASamplerRecordedRun(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()

	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	var events bytes.Buffer
	event := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["time"] = now.Format(time.RFC3339Nano)
		b, _ := json.Marshal(fields)
		events.Write(append(b, '\n'))
	}
	event("run_start", map[string]any{"argv": []string{"python", "train.py"}, "run_dir": dir})
	tl, err := memory.OpenTimeline(filepath.Join(dir, record.Timeline))
	if err != nil {
		t.Fatal(err)
	}
	gpu := &fakeGPU{used: []uint64{8 * gib, 8 * gib}}
	var summaries []record.MemorySummary
	for attempt := 1; attempt <= 2; attempt++ {
		event("attempt_start", map[string]any{"attempt": attempt, "knobs": map[string]any{"batch_size": 64 / attempt}})
		s := memory.NewSampler(memory.SamplerConfig{GPU: gpu, Timeline: tl, Attempt: attempt, Now: clock, Origin: t0})
		// The test drives samples itself through Run's public face: a Run
		// that is cancelled after the samples would need real time; instead
		// each phase gets samples from a short Run with a fast rate.
		for _, ph := range []struct {
			phase classify.Phase
			used  uint64
			n     int
		}{{classify.PhaseTrain, 12, 5}, {classify.PhaseVal, 20 + uint64(attempt), 5}, {classify.PhaseTrain, 12, 3}} {
			s.SetPhase(ph.phase, -1)
			if ph.phase == classify.PhaseVal {
				event("phase", map[string]any{"attempt": attempt, "phase": "val"})
			}
			gpu.used[0], gpu.used[1] = ph.used*gib, (ph.used-2)*gib
			runSamples(t, s, child.Process.Pid, ph.n, func() { now = now.Add(500 * time.Millisecond) })
		}
		sum := s.Summary()
		summaries = append(summaries, sum)
		if attempt == 1 {
			event("failure", map[string]any{"attempt": 1, "kind": "gpu_oom", "line": 10, "text": "CUDA out of memory"})
		}
		event("memory", map[string]any{"attempt": attempt, "summary": sum})
		event("attempt_end", map[string]any{"attempt": attempt, "exit_code": 2 - attempt})
		now = now.Add(3 * time.Second)
	}
	event("run_end", map[string]any{"exit_code": 0})
	tl.Close()
	os.WriteFile(filepath.Join(dir, record.Events), events.Bytes(), 0o644)

	code, out, errs := runReport(t, Options{RunDir: dir, JSON: true, Plot: filepath.Join(dir, "mem.png")})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var run Run
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatal(err)
	}
	if len(run.Attempts) != 2 {
		t.Fatalf("attempts %+v", run.Attempts)
	}
	for i, a := range run.Attempts {
		want := summaries[i].PeakFraction(classify.PhaseVal)
		if got := a.Memory.PeakFraction(classify.PhaseVal); got != want || want != float64(21+i)/24 {
			t.Errorf("attempt %d: val peak fraction %v, sampler said %v", i+1, got, want)
		}
	}
	// The timeline alone gives the same peaks (what the report uses when the
	// memory event is missing).
	ti, err := scanTimeline(filepath.Join(dir, record.Timeline))
	if err != nil {
		t.Fatal(err)
	}
	for i := range summaries {
		if got, want := ti.attempts[i+1].PeakFraction(classify.PhaseVal), summaries[i].PeakFraction(classify.PhaseVal); got != want {
			t.Errorf("attempt %d from the timeline: %v, want %v", i+1, got, want)
		}
	}
	if len(ti.valSpans) != 2 {
		t.Errorf("validation spans %+v", ti.valSpans)
	}
	if st, err := os.Stat(filepath.Join(dir, "mem.png")); err != nil || st.Size() < 10000 {
		t.Errorf("plot: %v", err)
	}
}

// runSamples lets Run take n samples at a fast rate, advancing the injected
// clock between them, and stops it.
func runSamples(t *testing.T, s *memory.Sampler, pid, n int, advance func()) {
	t.Helper()
	before := s.Summary().Samples
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	taken := make(chan struct{})
	count := 0
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func() int {
			// Asked before every sample: count them, stop after n.
			if count == n {
				cancel()
				close(taken)
				return 0
			}
			if count > 0 {
				advance()
			}
			count++
			return pid
		})
		close(done)
	}()
	<-taken
	<-done
	if got := s.Summary().Samples - before; got != n {
		t.Fatalf("took %d samples, want %d", got, n)
	}
}

// Each signal says what gpuguard did with it, as the supervisor records it
// (record.Signal's action).
func TestReportSignals(t *testing.T) {
	dir := t.TempDir()
	ev := strings.Join([]string{
		`{"time":"2026-03-01T09:00:00Z","type":"run_start","argv":["python","t.py"]}`,
		`{"time":"2026-03-01T09:00:01Z","type":"signal","signal":"SIGUSR1","action":"no job","pid":0}`,
		`{"time":"2026-03-01T09:00:02Z","type":"signal","signal":"SIGTERM","action":"forwarded","pid":7}`,
		`{"time":"2026-03-01T09:00:03Z","type":"signal","signal":"SIGINT","action":"killed","pid":7}`,
		`{"time":"2026-03-01T09:00:04Z","type":"signal","signal":"SIGHUP"}`,
	}, "\n")
	os.WriteFile(filepath.Join(dir, record.Events), []byte(ev), 0o644)
	code, out, errs := runReport(t, Options{RunDir: dir})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"signal SIGUSR1 at ", " (no job was running)\n", "signal SIGTERM at ", " (forwarded to the job)\n",
		"signal SIGINT at ", " (second signal: the job was killed)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^  signal SIGHUP at \d\d:\d\d:\d\d$`).MatchString(out) {
		t.Errorf("a signal without an action:\n%s", out)
	}
	_, out, _ = runReport(t, Options{RunDir: dir, JSON: true})
	var run Run
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatal(err)
	}
	var forwarded []bool
	for _, s := range run.Signals {
		forwarded = append(forwarded, s.Forwarded)
	}
	if len(run.Signals) != 4 || run.Signals[1].Action != "forwarded" || !reflect.DeepEqual(forwarded, []bool{false, true, false, false}) {
		t.Errorf("signals %+v", run.Signals)
	}
}

// The plot's scale follows the data: a job using a few MiB on a machine
// with 64 GiB of RAM and no cgroup limit is drawn in MiB, with no limit
// line (the machine's RAM bounds no job in particular, and is not drawn
// unless the machine ran short); a GPU's capacity the job came near is.
func TestPlotScale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, record.Timeline)
	const gib = 1 << 30
	csv := "elapsed_ms,attempt,phase,device,used_bytes,limit_bytes,job_bytes\n"
	for ms := 0; ms <= 4000; ms += 500 {
		csv += fmt.Sprintf("%d,1,train,host,%d,%d,\n%d,1,train,ram,%d,%d,\n", ms, 18<<20, 64*gib, ms, 900<<20, 64*gib)
	}
	if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	ti, err := scanTimeline(path)
	if err != nil {
		t.Fatal(err)
	}
	panels, err := buildPanels(&Run{RunDir: dir}, ti, path)
	if err != nil || len(panels) != 1 {
		t.Fatalf("%d panels, %v", len(panels), err)
	}
	p := panels[0]
	if p.Y.Label.Text != "host memory (MiB)" || p.Y.Max < 18 || p.Y.Max > 30 {
		t.Errorf("y axis %q up to %v, want MiB up to a little above 18", p.Y.Label.Text, p.Y.Max)
	}

	// The fixture: GPUs near their capacity, the cgroup near its limit.
	f, err := os.Open("testdata/run-oom/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	run, err := readEvents(f, "testdata/run-oom")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ti, err = scanTimeline("testdata/run-oom/" + record.Timeline)
	if err != nil {
		t.Fatal(err)
	}
	panels, err = buildPanels(run, ti, "testdata/run-oom/"+record.Timeline)
	if err != nil || len(panels) != 2 {
		t.Fatalf("%d panels, %v", len(panels), err)
	}
	if y := panels[0].Y; y.Label.Text != "GPU memory (GiB)" || y.Max < 40 || y.Max > 52 {
		t.Errorf("GPU panel: %q up to %v", y.Label.Text, y.Max)
	}
	if y := panels[1].Y; y.Label.Text != "host memory (GiB)" || y.Max < 64 || y.Max > 75 {
		t.Errorf("host panel: %q up to %v", y.Label.Text, y.Max)
	}
}

// A run whose attempts ended before the first memory sample (a job of a
// few milliseconds) leaves timeline.csv with its header alone: the plot
// still shows the attempts, and says why there is no line.
func TestReportPlotWithoutSamples(t *testing.T) {
	run := t.TempDir()
	for _, name := range []string{"events.jsonl", "state.json"} {
		data, err := os.ReadFile(filepath.Join("testdata/run-oom", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(run, "timeline.csv"), []byte(record.TimelineHeader+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pngPath := filepath.Join(t.TempDir(), "mem.png")
	code, _, errs := runReport(t, Options{RunDir: run, Plot: pngPath})
	if code != 0 || !strings.Contains(errs, "holds no memory sample (the attempts ended before the first)") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
}

// The OOM's place the torch probe saw is in the attempt's report.
func TestReportShowsTheProbesSite(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	zero, code := int64(0), 1
	var ev []byte
	ev = append(ev, record.Marshal(t0, record.RunStart{Argv: []string{"python", "train.py"}})...)
	ev = append(ev, record.Marshal(t0, record.AttemptStart{Attempt: 1, LogOffset: &zero})...)
	ev = append(ev, record.Marshal(t0.Add(time.Minute), record.AttemptEnd{Attempt: 1, ExitCode: code, Site: &record.ProbeSite{
		Module: "Net.encoder.0", Pass: "backward", Phase: "train", Step: 3}})...)
	if err := os.WriteFile(filepath.Join(dir, record.Events), ev, 0o644); err != nil {
		t.Fatal(err)
	}
	status, out, errs := runReport(t, Options{RunDir: dir})
	if status != 0 || !strings.Contains(out, "  oom site:   backward of Net.encoder.0 (train, step 3)") {
		t.Errorf("exit %d, stderr %q, report:\n%s", status, errs, out)
	}
}

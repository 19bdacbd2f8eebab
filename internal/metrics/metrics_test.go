package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// parse reads a metrics file with Prometheus' own text parser.
func parse(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	return fams
}

// value is the value of the sample of family name whose labels are labels
// (name=value pairs; the run label is left out of the comparison unless
// labels name it); ok false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	_, withRun := want["run"]
next:
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			if l.GetName() != "run" || withRun {
				got[l.GetName()] = l.GetValue()
			}
		}
		if len(got) != len(want) {
			continue
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		}
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

func want(t *testing.T, fams map[string]*dto.MetricFamily, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(fams, name, labels...)
	if !ok {
		t.Errorf("no %s%v", name, labels)
	} else if got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

func TestRunMetrics(t *testing.T) {
	dir := t.TempDir()
	runFile, nodeFile := filepath.Join(dir, FileName), filepath.Join(dir, "node", "gpuguard.prom")
	os.Mkdir(filepath.Dir(nodeFile), 0o755)
	var warns []string
	w := New([]string{runFile, nodeFile}, func(m string) { warns = append(warns, m) })

	// The checkpoint the second attempt resumes from was written 40 s into
	// the first attempt, which failed 100 s in; the second starts 5 s later.
	ckpt := filepath.Join(dir, "step_100.ckpt")
	os.WriteFile(ckpt, nil, 0o644)
	t0 := time.Unix(1_700_000_000, 0)
	os.Chtimes(ckpt, t0.Add(41*time.Second), t0.Add(41*time.Second))
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	gpu := record.MemorySummary{
		Devices: []record.GPUDevice{{ID: "gpu0", TotalBytes: 80 << 30}},
		Phases: []record.PhaseSummary{
			{Phase: classify.PhaseTrain, GPU: []record.DevicePeak{{ID: "gpu0", PeakBytes: 70 << 30, CapacityBytes: 80 << 30}}, HostPeakBytes: 3 << 30},
			{Phase: classify.PhaseVal, GPU: []record.DevicePeak{{ID: "gpu0", PeakBytes: 79 << 30, CapacityBytes: 80 << 30}}},
		},
	}
	steps := []struct {
		t  float64
		ev record.Event
	}{
		{0, record.RunStart{Argv: []string{"python", "train.py", "--name", `a "b"`}, RunDir: dir, Workdir: dir}},
		{0, record.Policy{Knobs: map[string]record.Value{"batch_size": record.Text("32"), "lr": record.Text("3e-4"), "precision": record.Text("bf16"), "crop": {Null: true}}}},
		{1, record.AttemptStart{Attempt: 1}},
		{50, record.Phase{Attempt: 1, Phase: classify.PhaseVal}},
		{101, record.AttemptEnd{Attempt: 1, ExitCode: 1, DurationS: 100, Verdict: &classify.Verdict{Kind: classify.KindGPUOOM}}},
		{101, record.Memory{Attempt: 1, Summary: gpu}},
		{101, record.Decision{Attempt: 1, Verb: "relaunch", Checkpoint: "step_100.ckpt",
			Knobs: map[string]record.Value{"batch_size": record.Text("16"), "lr": record.Text("3e-4"), "precision": record.Text("bf16")}}},
		{106, record.AttemptStart{Attempt: 2}},
	}
	for _, s := range steps {
		w.Observe(at(s.t), s.ev)
	}
	for _, p := range []string{runFile, nodeFile} {
		fams := parse(t, p)
		want(t, fams, 1, "gpuguard_run_info", "run", dir, "command", `python train.py --name a "b"`)
		want(t, fams, 2, "gpuguard_attempts_total", "run", dir)
		want(t, fams, 16, "gpuguard_knob", "run", dir, "knob", "batch_size")
		want(t, fams, 1, "gpuguard_running")
		want(t, fams, float64(t0.Unix()), "gpuguard_run_start_time_seconds")
		want(t, fams, 2, "gpuguard_attempts_total")
		want(t, fams, 1, "gpuguard_relaunches_total", "cause", "gpu_oom")
		want(t, fams, 16, "gpuguard_knob", "knob", "batch_size")
		want(t, fams, 3e-4, "gpuguard_knob", "knob", "lr")
		if _, ok := value(fams, "gpuguard_knob", "knob", "precision"); ok {
			t.Error("a knob that is not a number is a gauge")
		}
		want(t, fams, 70<<30, "gpuguard_peak_memory_bytes", "phase", "train", "device", "gpu0")
		want(t, fams, 79<<30, "gpuguard_peak_memory_bytes", "phase", "val", "device", "gpu0")
		want(t, fams, 3<<30, "gpuguard_peak_memory_bytes", "phase", "train", "device", "host")
		want(t, fams, 80<<30, "gpuguard_capacity_bytes", "device", "gpu0")
		// 60 s of the failed attempt after the checkpoint, and 5 s to the
		// next start.
		want(t, fams, 65, "gpuguard_relaunch_lost_seconds_total")
		if _, ok := value(fams, "gpuguard_exit_code"); ok {
			t.Error("an exit code before the run ended")
		}
		if fams["gpuguard_attempts_total"].GetType() != dto.MetricType_COUNTER || fams["gpuguard_knob"].GetType() != dto.MetricType_GAUGE {
			t.Error("wrong types")
		}
	}

	// A relaunch from no checkpoint loses the whole attempt.
	w.Observe(at(126), record.AttemptEnd{Attempt: 2, ExitCode: 137, DurationS: 20})
	w.Observe(at(126), record.Decision{Attempt: 2, Verb: "relaunch"})
	w.Observe(at(127), record.AttemptStart{Attempt: 3})
	w.Observe(at(200), record.AttemptEnd{Attempt: 3, DurationS: 73})
	w.Observe(at(200), record.Decision{Attempt: 3, Verb: "done"})
	w.Observe(at(200), record.RunEnd{ExitCode: 0})
	fams := parse(t, runFile)
	want(t, fams, 65+20+1, "gpuguard_relaunch_lost_seconds_total")
	want(t, fams, 1, "gpuguard_relaunches_total", "cause", "exit")
	want(t, fams, 3, "gpuguard_attempts_total")
	want(t, fams, 0, "gpuguard_running")
	want(t, fams, 0, "gpuguard_exit_code")
	if len(warns) > 0 {
		t.Errorf("warnings %q", warns)
	}
	// Only the files themselves are left: the temporary ones were renamed.
	entries, _ := os.ReadDir(filepath.Dir(nodeFile))
	if len(entries) != 1 {
		t.Errorf("node directory holds %v", entries)
	}
}

// A metrics file that cannot be written is said once; the others are
// written.
func TestUnwritable(t *testing.T) {
	dir := t.TempDir()
	var warns []string
	w := New([]string{filepath.Join(dir, "missing", "m.prom"), filepath.Join(dir, FileName)}, func(m string) { warns = append(warns, m) })
	w.Observe(time.Now(), record.RunStart{})
	w.Observe(time.Now(), record.AttemptStart{Attempt: 1})
	if len(warns) != 1 || !strings.Contains(warns[0], "missing") {
		t.Errorf("warnings %q", warns)
	}
	want(t, parse(t, filepath.Join(dir, FileName)), 1, "gpuguard_attempts_total")
}

// A continued run's metrics count the attempts its earlier gpuguard
// recorded.
func TestReplay(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1_700_000_000, 0)
	var journal []byte
	for i, ev := range []record.Event{
		record.RunStart{RunDir: dir},
		record.AttemptStart{Attempt: 1},
		record.AttemptEnd{Attempt: 1, ExitCode: 1, DurationS: 10, Verdict: &classify.Verdict{Kind: classify.KindGPUOOM}},
		record.Decision{Attempt: 1, Verb: "relaunch"},
		record.AttemptStart{Attempt: 2},
		record.AttemptEnd{Attempt: 2, ExitCode: 1, Verdict: &classify.Verdict{Kind: classify.KindGPUOOM}},
		record.Decision{Attempt: 2, Verb: "give_up"},
		record.RunEnd{ExitCode: 1},
	} {
		journal = append(journal, record.Marshal(t0.Add(time.Duration(i)*time.Second), ev)...)
	}
	entries, bad, err := record.Read(strings.NewReader(string(journal)))
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	w := New([]string{filepath.Join(dir, FileName)}, nil)
	w.Replay(entries)
	w.Observe(t0.Add(time.Hour), record.RunStart{RunDir: dir})
	w.Observe(t0.Add(time.Hour), record.AttemptStart{Attempt: 3})
	fams := parse(t, filepath.Join(dir, FileName))
	want(t, fams, 3, "gpuguard_attempts_total")
	want(t, fams, 1, "gpuguard_relaunches_total", "cause", "gpu_oom")
	want(t, fams, 10+2, "gpuguard_relaunch_lost_seconds_total") // attempt 1 whole, and 2 s to attempt 2
	want(t, fams, 1, "gpuguard_running")
	if _, ok := value(fams, "gpuguard_exit_code"); ok {
		t.Error("the earlier gpuguard's exit code is kept")
	}
}

// The command label holds no secret given on the command line, and a
// command that is not UTF-8 still gives a file Prometheus reads.
func TestCommandLabel(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	w := New([]string{p}, func(m string) { t.Errorf("warning %q", m) })
	w.Observe(time.Now(), record.RunStart{RunDir: dir, Argv: []string{"python", "train.py", "--api-key=s3cr3t", "--token", "abc", "https://u:pw@host/x", "HF_TOKEN=zzz", "\xff"}})
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cr3t", "abc", "pw@", "zzz"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("%s holds %q:\n%s", p, secret, data)
		}
	}
	want(t, parse(t, p), 1, "gpuguard_run_info", "command", "python train.py --api-key=*** --token *** https://u:***@host/x HF_TOKEN=*** \uFFFD")
}

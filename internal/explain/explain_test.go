package explain

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// run calls Command and returns its status, stdout and stderr.
func run(t *testing.T, stdin string, json bool, paths ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Command(Options{Paths: paths, JSON: json, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	if err != nil && !exitcode.Silent(err) {
		fmt.Fprintf(&errb, "gpuguard explain: %v\n", err) // as the command line prints it
	}
	return exitcode.Of(err), out.String(), errb.String()
}

// Golden files: every testdata/*.log explained as text and as JSON.
func TestGolden(t *testing.T) {
	logs, err := filepath.Glob("testdata/*.log")
	if err != nil || len(logs) == 0 {
		t.Fatalf("no test logs: %v", err)
	}
	for _, log := range logs {
		for _, asJSON := range []bool{false, true} {
			ext := ".txt.golden"
			if asJSON {
				ext = ".json.golden"
			}
			golden := strings.TrimSuffix(log, ".log") + ext
			t.Run(filepath.Base(golden), func(t *testing.T) {
				code, out, errs := run(t, "", asJSON, log)
				if code != exitcode.OK || errs != "" {
					t.Fatalf("status %d, stderr %q", code, errs)
				}
				if *update {
					if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./explain -update to create it)", err)
				}
				if out != string(want) {
					t.Errorf("output differs from %s (go test ./explain -update rewrites it):\n--- got\n%s--- want\n%s", golden, out, want)
				}
			})
		}
	}
}

func TestJSONShape(t *testing.T) {
	code, out, errs := run(t, "", true, "testdata/phases-only.log", "testdata/val-oom-fragmentation.log", "testdata/cpu-alloc.log")
	if code != exitcode.OK || errs != "" {
		t.Fatalf("status %d stderr %q", code, errs)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var objs []map[string]any
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, m)
	}
	if len(objs) != 3 {
		t.Fatalf("%d objects, want one per log", len(objs))
	}
	for _, m := range objs {
		for _, k := range []string{"file", "kind", "phase", "rank", "line", "oom", "fragmentation", "phases", "diagnosis", "suggestions"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%v: key %q missing", m["file"], k)
			}
		}
		if _, ok := m["phases"].([]any); !ok {
			t.Errorf("%v: phases = %#v, want a list", m["file"], m["phases"])
		}
		if _, ok := m["suggestions"].([]any); !ok {
			t.Errorf("%v: suggestions = %#v, want a list", m["file"], m["suggestions"])
		}
	}
	none, val, cpu := objs[0], objs[1], objs[2]
	if none["kind"] != "none" || none["oom"] != nil || none["rank"] != nil || len(none["suggestions"].([]any)) != 0 {
		t.Errorf("phases-only: %v", none)
	}
	if val["kind"] != "gpu_oom" || val["phase"] != "val" || val["line"] != float64(7) || val["fragmentation"] != true || val["step"] != float64(1000) {
		t.Errorf("val OOM: %v", val)
	}
	oom := val["oom"].(map[string]any)
	for _, k := range []string{"requested_bytes", "total_bytes", "free_bytes", "in_use_bytes", "allocated_bytes", "reserved_unallocated_bytes", "reserved_total_bytes", "device"} {
		if _, ok := oom[k]; !ok {
			t.Errorf("oom.%s missing", k)
		}
	}
	if oom["requested_bytes"] != float64(16986595656) || oom["device"] != "GPU 0" {
		t.Errorf("oom %v", oom)
	}
	if cpu["phase"] != nil {
		t.Errorf("a log without phases must have \"phase\": null, got %#v", cpu["phase"])
	}
	coom := cpu["oom"].(map[string]any)
	if coom["total_bytes"] != nil || coom["requested_bytes"] != float64(98784247808) {
		t.Errorf("cpu oom %v", coom)
	}
}

func TestStdin(t *testing.T) {
	log, err := os.ReadFile("testdata/nccl-timeout.log")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, string(log), false, "-")
	if code != exitcode.OK || errs != "" {
		t.Fatalf("status %d stderr %q", code, errs)
	}
	if !strings.HasPrefix(out, "standard input: failed, not for memory (crash)") || !strings.Contains(out, "rank 2") {
		t.Errorf("output:\n%s", out)
	}
	// A real pipe, as a shell gives it.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(log)
		w.Close()
	}()
	var o bytes.Buffer
	if code := exitcode.Of(Command(Options{Paths: []string{"-"}, JSON: true, Stdin: r, Stdout: &o, Stderr: os.Stderr})); code != exitcode.OK {
		t.Fatalf("status %d", code)
	}
	r.Close()
	var m map[string]any
	if err := json.Unmarshal(o.Bytes(), &m); err != nil || m["file"] != "-" || m["kind"] != "crash" {
		t.Errorf("%v %v", err, m)
	}
	// "-" twice: the second cannot be read.
	code, _, errs = run(t, string(log), false, "-", "-")
	if code != exitcode.NoInput || !strings.Contains(errs, "more than once") {
		t.Errorf("status %d stderr %q", code, errs)
	}
}

func TestUnreadable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such.log")
	code, out, errs := run(t, "", false, missing, "testdata/cpu-alloc.log")
	if code != exitcode.NoInput {
		t.Errorf("status %d, want %d", code, exitcode.NoInput)
	}
	if !strings.Contains(errs, missing) || !strings.Contains(errs, "no such file") {
		t.Errorf("stderr %q should name the file and the reason", errs)
	}
	if !strings.HasPrefix(out, "testdata/cpu-alloc.log: host memory allocation failed") {
		t.Errorf("the readable log is still explained; stdout:\n%s", out)
	}
	code, _, errs = run(t, "", true, dir)
	if code != exitcode.NoInput || !strings.Contains(errs, "is a directory") {
		t.Errorf("directory: status %d stderr %q", code, errs)
	}
	if os.Geteuid() != 0 { // root reads any file
		locked := filepath.Join(dir, "locked.log")
		os.WriteFile(locked, []byte("x\n"), 0)
		if code, _, errs := run(t, "", false, locked); code != exitcode.NoInput || !strings.Contains(errs, "permission denied") {
			t.Errorf("unreadable: status %d stderr %q", code, errs)
		}
	}
}

func TestGzip(t *testing.T) {
	log, err := os.ReadFile("testdata/val-oom-fragmentation.log")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "train.log.gz")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(log)
	zw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "", true, p)
	if code != exitcode.OK || errs != "" || !strings.Contains(out, `"kind":"gpu_oom"`) || !strings.Contains(out, `"line":7`) {
		t.Errorf("status %d stderr %q out %s", code, errs, out)
	}
	// A file that starts like gzip but is not.
	bad := filepath.Join(t.TempDir(), "bad.gz")
	os.WriteFile(bad, []byte{0x1f, 0x8b, 0, 1, 2}, 0o644)
	if code, _, errs := run(t, "", false, bad); code != exitcode.NoInput || !strings.Contains(errs, "gzip") {
		t.Errorf("bad gzip: status %d stderr %q", code, errs)
	}
}

// A log that shows a failure still exits 0: explain succeeded.
func TestFailureIsNotAnError(t *testing.T) {
	code, out, _ := run(t, "", false, "testdata/dataloader-killed-two-ranks.log")
	if code != exitcode.OK || !strings.Contains(out, "killed for host memory (host_oom)") || !strings.Contains(out, "rank 1") {
		t.Errorf("status %d\n%s", code, out)
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aaa bbb ccc dddddddddd e", 7)
	want := []string{"aaa bbb", "ccc", "dddddddddd", "e"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("wrap = %q, want %q", got, want)
	}
	if c := clip("héllo wörld", 2); c != "h…" {
		t.Errorf("clip = %q", c)
	}
}

// A run directory whose journal lacks offsets (an older gpuguard) is
// explained as one log; a torn last line of the journal is skipped.
func TestRunDirWithoutOffsets(t *testing.T) {
	dir := t.TempDir()
	log, err := os.ReadFile("testdata/cpu-alloc.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "output.log"), log, 0o644); err != nil {
		t.Fatal(err)
	}
	events := `{"type":"attempt_start","attempt":1}` + "\n" + `{"type":"attempt_st`
	if err := os.WriteFile(filepath.Join(dir, "events.jsonl"), []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "", true, dir)
	if code != exitcode.OK || errs != "" || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, `"file":"`+filepath.Join(dir, "output.log")+`","kind":"cpu_alloc_oom"`) {
		t.Fatalf("status %d, stderr %q, out %s", code, errs, out)
	}

	// With offsets, each attempt is read apart: the OOM of the first is not
	// seen by the second, which starts after it.
	events = `{"type":"attempt_start","attempt":1,"log_offset":0}` + "\n" +
		fmt.Sprintf(`{"type":"attempt_start","attempt":2,"log_offset":%d}`, len(log)) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "events.jsonl"), []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "output.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("Epoch 1: 100%|██████████| 10/10\ntraining complete\n")
	f.Close()
	code, out, errs = run(t, "", true, dir)
	got := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitcode.OK || errs != "" || len(got) != 2 ||
		!strings.Contains(got[0], `"attempt":1,"kind":"cpu_alloc_oom"`) || !strings.Contains(got[1], `"attempt":2,"kind":"none"`) {
		t.Fatalf("status %d, stderr %q, out %s", code, errs, out)
	}
}

// What is not a text log is refused with status DataErr, not explained as
// "no failure found" or as whatever its bytes happen to match.
func TestNotALog(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"empty.log":  "",
		"gpuguard":   "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00 Killed\n",
		"memory.png": "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
		"data.bin":   "CUDA out of memory\x00\x00\x01",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		"empty.log":  "it is empty; name the log of a job that printed something",
		"gpuguard":   "it is an executable (ELF), not a text log; name the file the job's output went to, or a gpuguard run directory",
		"memory.png": "it is a PNG image, not a text log",
		"data.bin":   "it is binary data, not a text log",
	} {
		path := filepath.Join(dir, name)
		code, out, errs := run(t, "", false, path)
		if code != exitcode.DataErr || out != "" || !strings.HasPrefix(errs, "gpuguard explain: cannot explain "+path+": "+want) {
			t.Errorf("%s: status %d, stdout %q, stderr %q", name, code, out, errs)
		}
	}
	if code, _, errs := run(t, "", false, "-"); code != exitcode.DataErr || !strings.Contains(errs, "cannot explain standard input: it is empty") {
		t.Errorf("empty stdin: %d %q", code, errs)
	}
	// The first failure's status, and the other logs still explained.
	code, out, _ := run(t, "", false, filepath.Join(dir, "nope.log"), filepath.Join(dir, "empty.log"), "testdata/cpu-alloc.log")
	if code != exitcode.NoInput || !strings.Contains(out, "cpu-alloc.log: ") {
		t.Errorf("missing, then empty: %d %q", code, out)
	}
	// A gzip-compressed binary is no log either.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(files["gpuguard"]))
	zw.Close()
	os.WriteFile(filepath.Join(dir, "bin.gz"), gz.Bytes(), 0o644)
	if code, _, errs := run(t, "", false, filepath.Join(dir, "bin.gz")); code != exitcode.DataErr || !strings.Contains(errs, "executable") {
		t.Errorf("gzip binary: %d %q", code, errs)
	}
}

// A run made with --probe torch has the OOM's place in its attempt_end:
// explain shows it, in the text and as "site" in the JSON.
func TestRunDirShowsTheProbesSite(t *testing.T) {
	dir := t.TempDir()
	log := "step 1 loss 2.0\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free.\n"
	if err := os.WriteFile(filepath.Join(dir, record.OutputLog), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	zero, rank := int64(0), 1
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	var ev []byte
	ev = append(ev, record.Marshal(t0, record.AttemptStart{Attempt: 1, LogOffset: &zero})...)
	ev = append(ev, record.Marshal(t0.Add(time.Minute), record.AttemptEnd{Attempt: 1, ExitCode: 1, Site: &record.ProbeSite{
		Module: "Net.decoder.layers.11.attn", Pass: "forward", Phase: "val", Step: 1000, Shapes: "[[8,512,1024]]", Rank: &rank}})...)
	if err := os.WriteFile(filepath.Join(dir, record.Events), ev, 0o644); err != nil {
		t.Fatal(err)
	}
	want := "forward of Net.decoder.layers.11.attn (val, step 1000, rank 1, inputs [[8,512,1024]])"
	code, out, _ := run(t, "", false, dir)
	if code != 0 || !strings.Contains(out, "  site      "+want) {
		t.Errorf("exit %d, text:\n%s", code, out)
	}
	code, out, _ = run(t, "", true, dir)
	if code != 0 || !strings.Contains(out, `"site":{"module":"Net.decoder.layers.11.attn","pass":"forward","phase":"val","step":1000`) {
		t.Errorf("exit %d, JSON:\n%s", code, out)
	}
}

// explain RUN_DIR reads the run's own evidence of how each attempt ended,
// not the output alone: a main process the kernel killed in its memory
// cgroup printed nothing about it (torchvision's reference trainer), and a
// hung job gpuguard stopped printed nothing either. Its verdict is the live
// one's.
func TestRunDirUsesTheRunsEvidence(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	progress := "Epoch: [0]  [ 100/5005]  eta: 1:02:11  lr: 0.1  img/s: 402.3  loss: 6.1120 (6.3201)  time: 0.3880  data: 0.0011  max mem: 10542\n" +
		"Epoch: [0]  [ 110/5005]  eta: 1:02:01  lr: 0.1  img/s: 401.9  loss: 6.0911 (6.2977)  time: 0.3871  data: 0.0010  max mem: 10542\n"
	for _, tc := range []struct {
		name       string
		end        record.AttemptEnd
		kind, text string
	}{
		{"cgroup kill", record.AttemptEnd{Attempt: 1, ExitCode: 137, Signal: "SIGKILL",
			Verdict: &classify.Verdict{Kind: classify.KindHostOOM, Reason: "killed by the memory cgroup's out-of-memory killer", CgroupOOMKills: 2}},
			"host_oom", "memory cgroup's OOM killer killed 2 process(es)"},
		{"SIGKILL, no live verdict", record.AttemptEnd{Attempt: 1, ExitCode: 137, Signal: "SIGKILL"},
			"host_oom", "killed by SIGKILL"},
		{"hang stopped by gpuguard", record.AttemptEnd{Attempt: 1, ExitCode: 143, Signal: "SIGTERM", StoppedByUs: true,
			Verdict: &classify.Verdict{Kind: classify.KindHang, Reason: "no progress for 30m0s"}},
			"hang", "The output alone reads as none"},
		{"exit 0", record.AttemptEnd{Attempt: 1, ExitCode: 0, Verdict: &classify.Verdict{Kind: classify.KindNone}},
			"none", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, record.OutputLog), []byte(progress), 0o644); err != nil {
				t.Fatal(err)
			}
			zero := int64(0)
			ev := record.Marshal(t0, record.AttemptStart{Attempt: 1, LogOffset: &zero})
			ev = append(ev, record.Marshal(t0.Add(time.Minute), tc.end)...)
			if err := os.WriteFile(filepath.Join(dir, record.Events), ev, 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errs := run(t, "", true, dir)
			if code != exitcode.OK || !strings.Contains(out, `"kind":"`+tc.kind+`"`) || !strings.Contains(out, tc.text) {
				t.Errorf("status %d, stderr %q, out %s; want kind %s and %q", code, errs, out, tc.kind, tc.text)
			}
			// The log alone, without its journal, does not show it: the
			// case shows what the evidence adds.
			alone := filepath.Join(t.TempDir(), "alone.log")
			if err := os.WriteFile(alone, []byte(progress), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, out, _ := run(t, "", true, alone); !strings.Contains(out, `"kind":"none"`) {
				t.Errorf("the log alone: %s", out)
			}
		})
	}
}

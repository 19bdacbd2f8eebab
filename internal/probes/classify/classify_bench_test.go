package classify

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// mixedLog builds a realistic training log of about size bytes: ordinary
// progress output of several frameworks (tqdm frames redrawn with '\r',
// dict logs, per-iteration log lines, config and INFO lines, a caught
// warning traceback), with every corpus sample spliced in between.
func mixedLog(size int) []byte {
	data, _ := mixedLogSamples(size)
	return data
}

// mixedLogSamples is mixedLog and the number of corpus samples spliced in:
// 0 where the shared corpus is not found (a checkout not beside it, and no
// GPUGUARD_CORPUS), a log with no failure in it, not comparable with one
// that has them.
func mixedLogSamples(size int) ([]byte, int) {
	var samples [][]byte
	if m, err := filepath.Glob(filepath.Join(corpusDir, "*", "*.log")); err == nil {
		for _, p := range m {
			if data, err := os.ReadFile(p); err == nil {
				samples = append(samples, data)
			}
		}
	}
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		ep, it := i/200, i%200
		for f := 0; f < 5; f++ {
			fmt.Fprintf(&b, "Epoch %d:  %2d%%|████▌     | %d/%d [00:%02d<01:30,  4.%02dit/s, loss=0.%03d, v_num=3]\r", ep, it/2, it*5+f, 1000, f, it%100, (i*7+f)%1000)
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "{'loss': 0.%04d, 'grad_norm': 1.%03d, 'learning_rate': 4.5e-05, 'epoch': %d.%02d}\n", i%10000, i%1000, ep, it/2)
		fmt.Fprintf(&b, "[2024-05-23 18:41:%02d,337] [INFO] [logging.py:96:log_dist] [Rank 0] step=%d, skipped=0, lr=[3e-05], mom=[(0.9, 0.999)]\n", i%60, i)
		fmt.Fprintf(&b, "05/27 11:03:44 - mmengine - INFO - Epoch(train)  [%d][%d/7329]  lr: 2.0000e-02  eta: 1 day, 19:22:41  time: 0.6115  data_time: 0.0094  memory: 6218  loss: 0.8127  loss_cls: 0.3342\n", ep, it*10)
		fmt.Fprintf(&b, "     %d/300      8.02G     0.9096     0.6011      1.079        587        640: %2d%%|██████    | %d/57 [00:47<00:00,  1.20it/s]\n", ep, it/2, it%57)
		b.WriteString("INFO:root:Using /opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py with 8 workers and pin_memory=True\n")
		b.WriteString("  0%|          | 0/2000001 [00:00<?, ?it/s]Skipping token 2000000 with 1-dimensional vector ['300']; likely a header\n")
		b.WriteString("    hidden = self.proj_in(tokens.float()).relu_()  # shared backbone, run once per batch; see configs/model/base.yaml\n")
		if i%50 == 0 {
			b.WriteString("Validation DataLoader 0:  50%|█████     | 10/20 [00:01<00:01,  9.80it/s]\n")
			b.WriteString("/opt/venv/lib/python3.11/site-packages/lightning/pytorch/trainer/connectors/data_connector.py:441: UserWarning: The 'val_dataloader' does not have many workers which may be a bottleneck.\n")
		}
		if len(samples) > 0 && i%20 == 0 {
			b.Write(samples[(i/20)%len(samples)]) // about 3% of the lines
		}
	}
	return b.Bytes(), len(samples)
}

// reportCorpus shows in every result line how many corpus logs the mixed
// log holds (0: no failure in it, see mixedLogSamples).
func reportCorpus(b *testing.B, samples int) {
	b.ReportMetric(float64(samples), "corpus-logs")
}

// splitLines runs the splitter once and keeps copies of the lines.
func splitLines(data []byte) []lines.Line {
	var out []lines.Line
	s := lines.New(lines.DefaultMax, func(l lines.Line) {
		l.Text = append([]byte(nil), l.Text...)
		out = append(out, l)
	})
	s.Write(data)
	s.Flush()
	return out
}

// processCPU is this process's user+system CPU time (all threads: the
// garbage collector included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCPU readies a benchmark's timed loop and returns the process's CPU
// time: the keyword table, built once per process, is built before it (its
// allocations would otherwise land in the first benchmark's loop), and the
// set-up's garbage is collected, so that the loop pays for its own.
func startCPU() time.Duration {
	getKWMatcher()
	runtime.GC()
	return processCPU()
}

// reportCPU adds the throughput per CPU-second: on a shared machine the
// wall-clock MB/s also counts the time spent waiting for a core.
func reportCPU(b *testing.B, bytesPerOp int64, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
	}
}

// BenchmarkClassifyReader: splitter and classifier over a mixed log, all
// patterns on; MB/s is the throughput per core.
func BenchmarkClassifyReader(b *testing.B) {
	data, samples := mixedLogSamples(16 << 20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	c0 := startCPU()
	for b.Loop() {
		if _, err := ClassifyReader(bytes.NewReader(data), ClassifierOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, int64(len(data)), processCPU()-c0)
	reportCorpus(b, samples)
}

// BenchmarkSplitterMixed: the shared line splitter alone over the same log
// (a callback that does nothing), the part of ClassifyReader that is not the
// classifier's.
func BenchmarkSplitterMixed(b *testing.B) {
	data := mixedLog(16 << 20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	n := 0
	c0 := startCPU()
	for b.Loop() {
		s := lines.New(lines.DefaultMax, func(l lines.Line) { n += len(l.Text) })
		s.Write(data)
		s.Flush()
	}
	reportCPU(b, int64(len(data)), processCPU()-c0)
}

// BenchmarkClassifierLine: the classifier alone over the same log, already
// split into lines.
func BenchmarkClassifierLine(b *testing.B) {
	data, samples := mixedLogSamples(16 << 20)
	ls := splitLines(data)
	var n int64
	for _, l := range ls {
		n += int64(len(l.Text)) + 1
	}
	b.SetBytes(n)
	b.ReportAllocs()
	c0 := startCPU()
	for b.Loop() {
		c, _ := NewClassifier(ClassifierOptions{})
		for _, l := range ls {
			c.Line(l)
		}
	}
	reportCPU(b, n, processCPU()-c0)
	reportCorpus(b, samples)
}

// nonMatching are lines that no detector recognises: a benchmark op reads
// all of them, and must not allocate.
var nonMatching = []string{
	"  45%|████▌     | 123/456 [00:12<00:30,  4.51it/s]",
	"INFO:root:Using /opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py with 8 workers and pin_memory=True",
	"[2024-05-23 18:41:02,337] [INFO] [checkpointing.py:529:forward] Activation Checkpointing Information",
	"    hidden = self.proj_in(tokens.float()).relu_()  # shared backbone, run once per batch",
	"Loading checkpoint shards: 100%|██████████| 8/8 [00:27<00:00,  3.41s/it]",
	"Downloading data files: 100%|██████████| 3/3 [00:00<00:00, 1024.00it/s]",
	"wandb: Syncing run lucky-sun-42 to https://wandb.ai/team/project/runs/abc123",
	"lr_scheduler: cosine, warmup_steps: 500, weight_decay: 0.05, betas: (0.9, 0.999)",
	"",
	"Map: 100%|██████████| 12304/12304 [00:03<00:00, 3912.51 examples/s]",
	// Shapes the message reader, the traceback's structure, the progress
	// shapes and the host reporters look at, that say nothing: a JSON
	// record without a message field and one whose message is ordinary,
	// an escaped newline in quoted text, logger and glog prefixes, a rank
	// prefix, a frame of the job's own code that names no phase, a table
	// header, an arrow line, a syslog-style octal escape, an
	// orchestrator's ordinary line.
	`{"ts": 1732740000.1, "level": "info", "logger": "data"}`,
	`{"message": "loaded 12 shards from /data/train", "level": "INFO"}`,
	`config: {"prompt": "Question:\nAnswer:", "max_len": 512}`,
	"2026-11-27 21:46:05,123 - INFO - worker 3 started on host gpu-07",
	"E0212 03:12:01.551240  9914 file.cc:88] connection reset by peer, retrying",
	"[rank3]: 2026-11-27 21:46:05 loading tokenizer",
	`  File "/app/utils/io.py", line 12, in load_config`,
	"    cfg = yaml.safe_load(f)",
	"| model | params | dtype |",
	"=> loading weights from checkpoint-3000",
	"#015 #033[0m plain",
	"ray.worker: task scheduled on node 10.0.0.7",
	`kubelet: pulled image "trainer:1.2" in 3.1s`,
}

func BenchmarkClassifierNonMatching(b *testing.B) {
	c, _ := NewClassifier(ClassifierOptions{PhasePatterns: []PhasePattern{{PhaseVal, `^== eval pass \d+`}}})
	ls := make([]lines.Line, len(nonMatching))
	var n int64
	for i, s := range nonMatching {
		ls[i] = lines.Line{Text: []byte(s), Num: i + 1}
		n += int64(len(s)) + 1
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range ls {
			c.Line(l)
		}
	}
	if v := c.Verdict(); v.Kind != KindNone || len(v.Phases) != 0 {
		b.Fatalf("non-matching lines matched: %s %v", v.Kind, v.Phases)
	}
}

// The non-matching lines really allocate nothing (the benchmark's claim,
// checked in every test run).
func TestNonMatchingLinesDoNotAllocate(t *testing.T) {
	c, _ := NewClassifier(ClassifierOptions{})
	ls := make([]lines.Line, len(nonMatching))
	for i, s := range nonMatching {
		ls[i] = lines.Line{Text: []byte(s), Num: i + 1}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, l := range ls {
			c.Line(l)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per pass over lines that match nothing", allocs)
	}
	if v := c.Verdict(); v.Kind != KindNone || len(v.Phases) != 0 {
		t.Errorf("non-matching lines matched: %s %v", v.Kind, v.Phases)
	}
}

package classify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// The logs of testdata/consequences are multi-rank and multi-process logs
// of this project's making, in the formats PyTorch (ProcessGroupNCCL's
// watchdog, torchrun's teardown and ChildFailedError table), srun --label,
// gloo, fairseq and Ultralytics print; each pins which failure is the cause.
type consequenceSample struct {
	file   string
	kind   Kind
	reason string // a substring of Verdict.Reason
	line   int
	rank   int      // -1: none
	diag   []string // substrings of the diagnosis
	nodiag []string // what the diagnosis must not say
}

func TestFirstFailureSamples(t *testing.T) {
	for _, s := range []consequenceSample{
		{file: "oom-rank1-then-watchdog-rank0.log", kind: KindGPUOOM, reason: "CUDA out of memory", line: 6, rank: 1,
			diag: []string{"What was printed after it followed from it: NCCL timeout on rank 0 (line 7)."}},
		{file: "exception-rank3-then-watchdog.log", kind: KindCrash, reason: "ValueError: bad sample 88213", line: 5, rank: 3,
			diag: []string{"NCCL timeout on rank 0 (line 6)"}},
		{file: "watchdog-then-absurd-allocation.log", kind: KindCrash, reason: "NCCL timeout", line: 2, rank: 2,
			diag: []string{"followed from it: CUDA out of memory on rank 1 (line 6)"}},
		{file: "absurd-allocation-before-watchdog.log", kind: KindCrash, reason: "NCCL timeout", line: 6, rank: 0,
			diag: []string{"The CUDA out of memory on rank 3 (line 5), printed before it, followed from it"}},
		{file: "srun-label-remote-error-before-segfault.log", kind: KindCrash, reason: "segmentation fault", line: 3, rank: 1,
			diag: []string{"on host node-a03", "on rank 0 (line 2), printed before it, followed from it"}},
		{file: "torchrun-teardown-after-oom.log", kind: KindGPUOOM, reason: "CUDA out of memory", line: 6, rank: 1,
			diag: []string{"SignalException: Process 30418 got signal: 15 on rank 0 (line 11)"}},
		{file: "peer-reset-before-host-oom.log", kind: KindHostOOM, reason: "SIGKILL", line: 6, rank: -1,
			diag: []string{"Connection closed by peer [10.20.0.7]:47113 on rank 0 (line 5), printed before it"}},
		// A rank hung without a word: the watchdog's timeout is all there
		// is, and torchrun's teardown (SIGTERM to the peer, the SIGABRT
		// the watchdog raised, its ChildFailedError table) does not
		// replace it; the table names the host.
		{file: "torchrun-table-after-watchdog.log", kind: KindCrash, reason: "NCCL timeout", line: 2, rank: 0,
			diag: []string{"on host gpu-node-04"}},
		{file: "heartbeat-stuck-then-communicator-aborted.log", kind: KindCrash, reason: "NCCL timeout", line: 2, rank: 2,
			diag: []string{"NCCL communicator was aborted on rank 1.) on rank 1 (line 3)"}},

		// Recovered out-of-memory errors.
		{file: "fairseq-recovered-then-checkpoint-missing.log", kind: KindCrash, reason: "checkpoint file not found", line: 10, rank: -1,
			diag: []string{"An earlier failure at line 2 (GPU out of memory (caught by the framework, batch skipped)) did not stop the job"}},
		{file: "fairseq-recovered-one-update-then-valueerror.log", kind: KindCrash, reason: "ValueError: found an empty batch", line: 8, rank: -1,
			diag: []string{"An earlier failure at line 2"}},
		{file: "fairseq-recovered-then-later-oom.log", kind: KindGPUOOM, reason: "CUDA out of memory", line: 8, rank: -1,
			diag: []string{"It asked for 3.50 GiB on GPU 0", "An earlier failure at line 2"}, nodiag: []string{"2.02 GiB"}},
		{file: "fairseq-caught-never-recovered.log", kind: KindGPUOOM, reason: "caught by the framework", line: 2, rank: -1,
			diag: []string{"It asked for 2.02 GiB on GPU 0", "no training step was printed after it"}},
		{file: "ultralytics-cpu-fallback-then-oom.log", kind: KindGPUOOM, reason: "CUDA out of memory", line: 10, rank: -1,
			diag: []string{"An earlier failure at line 3 (GPU out of memory (caught: the program fell back to the CPU))"}},
		{file: "ultralytics-cpu-fallback-trains-on.log", kind: KindNone, rank: -1,
			diag: []string{"An earlier failure at line 3 (GPU out of memory (caught: the program fell back to the CPU)) did not stop the job"}},
		// Lightning's batch-size finder catches its OOMs without printing
		// them: nothing failed.
		{file: "lightning-batch-size-finder.log", kind: KindNone, rank: -1, nodiag: []string{"earlier failure"}},
	} {
		t.Run(s.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "consequences", s.file))
			if err != nil {
				t.Fatal(err)
			}
			v := classifyString(t, string(data), ClassifierOptions{})
			if v.Kind != s.kind || !strings.Contains(v.Reason, s.reason) || v.Line != s.line {
				t.Fatalf("verdict %s %q at line %d, want %s %q at line %d", v.Kind, v.Reason, v.Line, s.kind, s.reason, s.line)
			}
			switch {
			case s.rank < 0 && v.Rank != nil:
				t.Errorf("rank %d, want none", *v.Rank)
			case s.rank >= 0 && (v.Rank == nil || *v.Rank != s.rank):
				t.Errorf("rank %s, want %d", fmtPtr(v.Rank), s.rank)
			}
			for _, want := range s.diag {
				if !strings.Contains(v.Diagnosis, want) {
					t.Errorf("diagnosis lacks %q:\n%s", want, v.Diagnosis)
				}
			}
			for _, no := range s.nodiag {
				if strings.Contains(v.Diagnosis, no) {
					t.Errorf("diagnosis says %q:\n%s", no, v.Diagnosis)
				}
			}
		})
	}
}

// Lines of the failures the ordering rule weighs, each with its rank.
const (
	ffOOM       = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity of 39.39 GiB of which 301.44 MiB is free. Of the allocated memory 36.02 GiB is allocated by PyTorch, and 101.00 MiB is reserved by PyTorch but unallocated.\n"
	ffValue     = "[rank3]: ValueError: bad sample 7\n"
	ffSegv      = "[rank2]: Fatal Python error: Segmentation fault\n"
	ffTimeout   = "[rank0]:[E1103 09:24:13.552000 4412 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"
	ffAborted   = "[rank0]: RuntimeError: NCCL communicator was aborted on rank 0.\n"
	ffRemote    = "[rank0]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5\n"
	ffReset     = "[rank0]: ConnectionResetError: [Errno 104] Connection reset by peer\n"
	ffPipe      = "[rank0]: BrokenPipeError: [Errno 32] Broken pipe\n"
	ffSignal    = "[rank0]: torch.distributed.elastic.multiprocessing.api.SignalException: Process 4412 got signal: 15\n"
	ffAbsurd    = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n"
	ffAbsurdGiB = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8589934592.00 GiB. GPU 1 has a total capacity of 79.10 GiB of which 61.22 GiB is free.\n"
	ffExit      = "srun: error: node-a03: task 0: Exited with exit code 1\n"
	ffAbort     = "[rank0]:Aborted (core dumped)\n"
	ffChild     = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
	ffWorker9   = "E0302 07:55:12.402000 5120 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 5127) of binary: /usr/bin/python\n"
)

// TestFirstFailureOrder runs each pair of failures in both orders: the
// cause is the verdict whichever comes first; between two causes or two
// consequences the order and the classes decide.
func TestFirstFailureOrder(t *testing.T) {
	type pair struct {
		name        string
		cause       string // the failure that must be the verdict
		consequence string
		reason      string // a substring of the verdict's reason
		bothOrders  bool   // the cause wins printed after the consequence too
	}
	for _, p := range []pair{
		{"OOM before a timeout", ffOOM, ffTimeout, "CUDA out of memory", true},
		{"exception before a timeout", ffValue, ffTimeout, "ValueError", true},
		{"segfault and a remote NCCL error", ffSegv, ffRemote, "segmentation fault", true},
		{"exception and an aborted communicator", ffValue, ffAborted, "ValueError", true},
		{"OOM and a connection reset", ffOOM, ffReset, "CUDA out of memory", true},
		{"exception and a broken pipe", ffValue, ffPipe, "ValueError", true},
		{"OOM and a peer's SIGTERM", ffOOM, ffSignal, "CUDA out of memory", true},
		{"timeout and an absurd allocation", ffTimeout, ffAbsurd, "NCCL timeout", true},
		{"timeout and an absurd size in GiB", ffTimeout, ffAbsurdGiB, "NCCL timeout", true},
		{"a killed worker and a timeout", ffWorker9, ffTimeout, "SIGKILL", true},
		{"a timeout and torchrun's ChildFailedError", ffTimeout, ffChild, "NCCL timeout", true},
		{"a timeout and a peer's SIGTERM", ffTimeout, ffSignal, "NCCL timeout", true},
		{"a timeout and a connection reset", ffTimeout, ffReset, "NCCL timeout", true},
		// What every rank torn down prints does not replace the
		// consequence that came first: it names no cause.
		{"a timeout before an exit status", ffTimeout, ffExit, "NCCL timeout", false},
		{"a timeout before an abort", ffTimeout, ffAbort, "NCCL timeout", false},
		{"an absurd allocation alone before an exception", ffAbsurd, ffValue, "CUDA out of memory", false},
	} {
		orders := [][2]string{{p.cause, p.consequence}}
		if p.bothOrders {
			orders = append(orders, [2]string{p.consequence, p.cause})
		}
		for i, o := range orders {
			name := p.name
			if i == 1 {
				name += ", printed the other way round"
			}
			t.Run(name, func(t *testing.T) {
				v := classifyString(t, o[0]+o[1], ClassifierOptions{})
				if !strings.Contains(v.Reason, p.reason) {
					t.Fatalf("verdict %s %q (line %d), want %q", v.Kind, v.Reason, v.Line, p.reason)
				}
				if !p.bothOrders || strings.Contains(p.consequence, "ChildFailedError") {
					return // not a consequence: set aside without a word
				}
				if !strings.Contains(v.Diagnosis, "followed from it") {
					t.Errorf("the diagnosis does not name the consequence:\n%s", v.Diagnosis)
				}
			})
		}
	}
}

// An absurd request with no collective failure around it stays the
// verdict, as a request larger than the device.
func TestAbsurdAllocationAlone(t *testing.T) {
	v := classifyString(t, ffAbsurdGiB, ClassifierOptions{})
	if v.Kind != KindGPUOOM || v.OOM == nil || v.OOM.Device == nil || *v.OOM.Device != "GPU 1" {
		t.Fatalf("verdict %s %+v", v.Kind, v.OOM)
	}
	if !strings.Contains(v.Diagnosis, "The request is absurd") {
		t.Errorf("diagnosis %q", v.Diagnosis)
	}
	for _, b := range []struct {
		text string
		want bool
	}{
		{"Tried to allocate more than 1EB memory.", true},
		{"Tried to allocate 8589934592.00 GiB.", true},
		{"Tried to allocate 1024.00 TiB.", true},
		{"Tried to allocate 1023.99 TiB.", false},
		{"Tried to allocate 79.00 GiB.", false},
		{"Tried to allocate 2.00 EiB.", true},
		{"Tried to allocate lots.", false},
	} {
		f, _ := gpuOOM([]byte(b.text), 0, "modern")
		if got := absurdRequest(&f, []byte(b.text)); got != b.want {
			t.Errorf("absurdRequest(%q) = %v, want %v", b.text, got, b.want)
		}
	}
}

// A caught OOM sends no live failure event (the supervisor's OOM grace
// would stop a job that goes on); the failure that replaces it does.
func TestCaughtOOMEvents(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "consequences", "fairseq-recovered-one-update-then-valueerror.log"))
	if err != nil {
		t.Fatal(err)
	}
	var failures []Event
	v := classifyString(t, string(data), ClassifierOptions{OnEvent: func(e Event) {
		if e.Type == EventFailure {
			failures = append(failures, e)
		}
	}})
	if len(failures) != 1 || failures[0].Line != 8 || failures[0].Kind != KindCrash || v.Line != 8 {
		t.Fatalf("failure events %+v (verdict at line %d), want one, the ValueError at line 8", failures, v.Line)
	}
}

// An OOM reported live and then recovered from sends EventRecovered once, on
// the marker's line, so that the supervisor does not stop a job that goes on.
func TestRecoveredEvent(t *testing.T) {
	log := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free.\n" +
		"WARNING: attempting to recover from OOM in forward/backward pass\n" +
		"WARNING: attempting to recover from OOM in forward/backward pass\n"
	var got []Event
	classifyString(t, log, ClassifierOptions{OnEvent: func(e Event) {
		if e.Type == EventFailure || e.Type == EventRecovered {
			got = append(got, e)
		}
	}})
	if len(got) != 2 || got[0].Type != EventFailure || got[1].Type != EventRecovered || got[1].Line != 2 {
		t.Errorf("events %+v, want the failure at line 1, then one EventRecovered at line 2", got)
	}
}

// The recovery marker only makes the current OOM caught: alone, or after
// another rank's OOM, it changes nothing.
func TestRecoveryLineScope(t *testing.T) {
	marker := "2026-03-04 22:01:33 | WARNING | fairseq.trainer | attempting to recover from OOM in forward/backward pass\n"
	if v := classifyString(t, marker, ClassifierOptions{}); v.Kind != KindNone {
		t.Errorf("the marker alone: %s %q", v.Kind, v.Reason)
	}
	v := classifyString(t, ffOOM+"[rank0]: "+marker+"[rank0]:step 10/100\n[rank0]:step 11/100\n"+ffValue, ClassifierOptions{})
	if v.Kind != KindGPUOOM {
		t.Errorf("rank 0's marker made rank 1's OOM caught: %s %q", v.Kind, v.Reason)
	}
}

// A rank the cgroup's OOM killer killed is the cause of the others'
// timeout, though the log shows only the timeout.
func TestConsequenceThenCgroupKill(t *testing.T) {
	c, err := NewClassifier(ClassifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	classifyInto(c, ffTimeout)
	c.Exit(Exit{Code: 1, CgroupOOMKills: 1})
	v := c.Verdict()
	if v.Kind != KindHostOOM || !strings.Contains(v.Diagnosis, "(NCCL timeout) followed from it") {
		t.Errorf("verdict %s %q: %s", v.Kind, v.Reason, v.Diagnosis)
	}
	// Without the kill the timeout stays.
	c, _ = NewClassifier(ClassifierOptions{})
	classifyInto(c, ffTimeout)
	c.Exit(Exit{Code: 1})
	if v := c.Verdict(); v.Kind != KindCrash || v.Reason != "NCCL timeout" {
		t.Errorf("verdict %s %q", v.Kind, v.Reason)
	}
}

func classifyInto(c *Classifier, log string) {
	s := lines.New(lines.DefaultMax, c.Line)
	s.Write([]byte(log))
	s.Flush()
}

// srun -N2 torchrun: rank 3's OOM names no host, and srun's line names the
// launcher's task; torchrun's root-cause block names the rank's host, which
// the verdict takes only when the block is about the rank that failed.
func TestRootCauseBlockGivesTheFailingRanksHost(t *testing.T) {
	const oom = "1: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 15.77 GiB of which 1.02 GiB is free.\n"
	block := func(host, rank string) string {
		return "1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" +
			"1: ============================================================\n" +
			"1: train.py FAILED\n" +
			"1: ------------------------------------------------------------\n" +
			"1: Root Cause (first observed failure):\n" +
			"1: [0]:\n" +
			"1:   time      : 2026-11-25_10:00:00\n" +
			"1:   host      : " + host + "\n" +
			"1:   rank      : " + rank + " (local_rank: 1)\n" +
			"1:   exitcode  : 1 (pid: 4242)\n" +
			"1:   error_file: <N/A>\n" +
			"1: ============================================================\n" +
			"srun: error: nodeb: task 1: Exited with exit code 1\n"
	}
	for _, tc := range []struct {
		name, log, host string
	}{
		{"the failing rank's block", oom + block("nodeb", "3"), "nodeb"},
		{"another rank's block", oom + block("nodea", "0"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind != KindGPUOOM || v.Rank == nil || *v.Rank != 3 {
				t.Fatalf("kind %s rank %s, want gpu_oom of rank 3", v.Kind, fmtPtr(v.Rank))
			}
			if v.Host != tc.host {
				t.Errorf("host %q, want %q", v.Host, tc.host)
			}
		})
	}
}

// The site of an OOM is the innermost frame printed just before it, of the
// same rank; a frame far above, or another rank's, is not.
func TestOOMSite(t *testing.T) {
	const oomLine = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free.\n"
	frames := "Traceback (most recent call last):\n" +
		"  File \"/work/train.py\", line 88, in <module>\n" +
		"    loss = model(x).sum()\n" +
		"  File \"/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py\", line 456, in _conv_forward\n" +
		"    return F.conv2d(input, weight, bias, self.stride,\n"
	for _, tc := range []struct{ name, log, want string }{
		{"the innermost frame", frames + oomLine, "/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py:456 in _conv_forward"},
		{"ranked", "[rank1]: " + strings.ReplaceAll(strings.TrimSuffix(frames, "\n"), "\n", "\n[rank1]: ") + "\n[rank1]: " + oomLine, "/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py:456 in _conv_forward"},
		{"another rank's frame", "[rank0]:   File \"/work/train.py\", line 88, in <module>\n[rank1]: " + oomLine, ""},
		{"a frame far above", frames + strings.Repeat("step 3 loss 1.0\n", 12) + oomLine, ""},
		{"no traceback", oomLine, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind != KindGPUOOM || v.Site != tc.want {
				t.Errorf("kind %s site %q, want gpu_oom at %q", v.Kind, v.Site, tc.want)
			}
		})
	}
}

// Failures of the machine rather than the job say so (Verdict.Machine): a
// scheduler's retry elsewhere may help them, never an OOM's.
func TestMachineTrouble(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      bool
	}{
		{"ECC", "RuntimeError: CUDA error: uncorrectable ECC error encountered\n", true},
		{"NCCL watchdog timeout", "[rank1]:[E1125 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1024, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600030 milliseconds before timing out.\n", true},
		{"Slurm node failure", "slurmstepd: error: *** JOB 4242 ON gn2 CANCELLED AT 2026-11-25T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n", true},
		{"an OOM", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free.\n", false},
		{"a plain crash", "ValueError: bad shape\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind == KindNone || v.Machine != tc.want {
				t.Errorf("kind %s (%q) machine %v, want %v", v.Kind, v.Reason, v.Machine, tc.want)
			}
		})
	}
}

// PyTorch before 2.1 refuses expandable_segments at its first CUDA
// allocation; the verdict names the option it refused.
func TestRefusedAllocOption(t *testing.T) {
	v := classifyString(t, "Traceback (most recent call last):\n  File \"/work/train.py\", line 12, in <module>\n    model = model.cuda()\nRuntimeError: Unrecognized CachingAllocator option: expandable_segments\n", ClassifierOptions{})
	if v.Kind != KindCrash || v.RefusedAllocOption != "expandable_segments" {
		t.Errorf("kind %s refused option %q, want a crash refusing expandable_segments", v.Kind, v.RefusedAllocOption)
	}
	if v := classifyString(t, "RuntimeError: CUDA error: out of resources\n", ClassifierOptions{}); v.RefusedAllocOption != "" {
		t.Errorf("refused option %q on another error", v.RefusedAllocOption)
	}
}

package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// Seam tests of the hooks (hooks.go): the loop runs for real, runOne and
// every registered hook included, down to the start of the job's
// processes, where a fake attempt (fakeRun) prints its lines through the
// attempt's scanner, is stopped by the hooks that stop it, and ends.

// fakeRun is one fake attempt.
type fakeRun struct {
	out  []string // lines it prints, one after the other
	code int      // its exit status
	// untilStopped: after its output it runs until a hook stops it (then
	// it dies of SIGTERM).
	untilStopped bool
	// during runs once the attempt started, before its output.
	during func(p *fakeProc)
	// startErr: the attempt cannot start.
	startErr error
}

// fakeProc is a fake attempt's processes.
type fakeProc struct {
	done    chan struct{}
	stopped chan string // the first Stop's reason
	once    sync.Once
	mu      sync.Mutex
	signals []syscall.Signal
}

func (p *fakeProc) PID() int                                  { return 0 }
func (p *fakeProc) Processes(dst []procfs.Proc) []procfs.Proc { return dst }
func (p *fakeProc) Done() <-chan struct{}                     { return p.done }
func (p *fakeProc) Stop(reason string)                        { p.once.Do(func() { p.stopped <- reason }) }
func (p *fakeProc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	p.signals = append(p.signals, sig)
	p.mu.Unlock()
}

// newHookTest is a loopTest whose attempts go through runOne and the hooks
// registered from its configuration, with fake processes.
func newHookTest(t *testing.T, policy string, argv, env []string, runs ...fakeRun) *loopTest {
	t.Helper()
	lt := newLoopTest(t, policy, argv, env)
	var mu sync.Mutex
	lt.after = func(d time.Duration) <-chan time.Time {
		mu.Lock()
		lt.waits = append(lt.waits, d)
		mu.Unlock()
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	lt.recordPlans()
	lt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		if n > len(runs) {
			t.Fatalf("attempt %d was started; the test fakes %d", n, len(runs))
		}
		return runFake(runs[n-1], spec, h)
	}
	t.Cleanup(lt.hooks.closeAll)
	if code := lt.register(group.Spec{}, false); code != 0 {
		t.Fatalf("register: %d", code)
	}
	return lt
}

// runFake runs r as an attempt started with spec and hooks h.
func runFake(r fakeRun, spec attemptSpec, h attemptHooks) (attemptResult, error) {
	if r.startErr != nil {
		return attemptResult{}, r.startErr
	}
	p := &fakeProc{done: make(chan struct{}), stopped: make(chan string, 1)}
	res := attemptResult{Code: r.code, Start: time.Now()}
	h.Started(p)
	if r.during != nil {
		r.during(p)
	}
	for i, ln := range r.out {
		spec.Scan(1, lines.Line{Text: []byte(ln), Num: i + 1})
	}
	if r.untilStopped {
		res.StopReason = <-p.stopped
		res.StoppedByUs, res.Code, res.Signal = true, 128+int(syscall.SIGTERM), syscall.SIGTERM
	}
	res.End = time.Now()
	close(p.done)
	end := record.AttemptEnd{}
	h.Ended(res, &end)
	return res, nil
}

const oomLine = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.12 GiB is free."

// journal is what the run journals of the types given, as it writes it.
type journal struct {
	mu  sync.Mutex
	evs []record.Event
}

func (j *journal) of(types ...string) []record.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	var got []record.Event
	for _, ev := range j.evs {
		if slices.Contains(types, ev.EventType()) {
			got = append(got, ev)
		}
	}
	return got
}

// record starts recording lt's journal.
func (j *journal) record(lt *loopTest) *journal {
	lt.job.RunDir.OnWrite(func(_ time.Time, ev record.Event) {
		j.mu.Lock()
		j.evs = append(j.evs, ev)
		j.mu.Unlock()
	})
	return j
}

// OOM grace, through runOne: a job that prints an out-of-memory error and
// hangs is stopped, its verdict is the OOM, the policy halves the batch,
// and attempt 2 runs with it; the failure goes to the journal.
func TestHookOOMGraceStopsAHungJob(t *testing.T) {
	lt := newHookTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		fakeRun{out: []string{"step 1 loss 0.5", oomLine}, untilStopped: true},
		fakeRun{out: []string{"step 2 loss 0.4"}})
	j := new(journal).record(lt)
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if len(lt.rows) != 2 || lt.rows[0].verdict.Kind != classify.KindGPUOOM || lt.rows[0].code != 143 {
		t.Fatalf("rows %+v", lt.rows)
	}
	if !slices.Contains(lt.plans[1].argv, "4") {
		t.Errorf("attempt 2 does not halve the batch: %q", lt.plans[1].argv)
	}
	wantContains(t, "status", lt.stderr.String(), "the job did not exit within 30s of its out-of-memory error: stopping it")
	if f := j.of("failure"); len(f) != 1 || f[0].(record.Failure).Kind != classify.KindGPUOOM || f[0].(record.Failure).Stream != "stdout" {
		t.Errorf("failure events %v", f)
	}
}

// The rejection lines of an attempt reach its row (and the policy).
func TestHookRejectionsReachTheRow(t *testing.T) {
	lt := newHookTest(t, "", []string{"train.py"}, []string{"PATH=/bin"},
		fakeRun{out: []string{"usage: train.py [-h]", "train.py: error: unrecognized arguments: --batch-size 4"}, code: 2})
	if code := lt.attempts(); code != 2 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if got := lt.rows[0].rejections; len(got) != 1 || !strings.Contains(got[0], "unrecognized arguments") {
		t.Errorf("rejections %q", got)
	}
}

// A checkpoint saved where no glob looks is said once.
func TestHookCheckpointSavedOutsideTheGlobs(t *testing.T) {
	lt := newHookTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		fakeRun{out: []string{"Saved checkpoint to out/model-100.pt", "Saved checkpoint to out/model-200.pt"}})
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if n := strings.Count(lt.stderr.String(), "which no checkpoint glob matches"); n != 1 {
		t.Errorf("said %d times:\n%s", n, lt.stderr.String())
	}
}

// An old PyTorch's refusal of gpuguard's allocator option: attempt 2 runs
// without gpuguard's allocator settings, and the policy is not asked.
func TestHookAllocatorRefusalRetriesWithout(t *testing.T) {
	refused := "RuntimeError: Unrecognized CachingAllocator option: expandable_segments"
	lt := newHookTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		fakeRun{out: []string{refused}, code: 1}, fakeRun{})
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if slices.ContainsFunc(lt.plans[1].env, func(kv string) bool { return strings.HasPrefix(kv, "PYTORCH_CUDA_ALLOC_CONF=") }) ||
		!slices.ContainsFunc(lt.plans[0].env, func(kv string) bool { return strings.HasPrefix(kv, "PYTORCH_CUDA_ALLOC_CONF=") }) {
		t.Errorf("attempt 1 env %q\nattempt 2 env %q", lt.plans[0].env, lt.plans[1].env)
	}
	if lt.rows[0].decision != "relaunch without gpuguard's allocator settings" || !slices.Contains(lt.plans[1].argv, "8") {
		t.Errorf("rows %+v, attempt 2 %q", lt.rows, lt.plans[1].argv)
	}
}

// The stall watchdog stops a job that stopped making progress, and its
// verdict is a hang.
func TestHookStallStopsAHungJob(t *testing.T) {
	pol := "version: 1\nhang: {min: 100ms, factor: 2, max: 200ms}\n" // no rhythm in one burst: max applies
	lt := newHookTest(t, pol, []string{"train.py"}, []string{"PATH=/nowhere"},
		fakeRun{out: []string{"step 1 loss 0.5", "step 2 loss 0.4", "step 3 loss 0.3"}, untilStopped: true})
	j := new(journal).record(lt)
	lt.attempts()
	if len(lt.rows) != 1 || lt.rows[0].verdict.Kind != classify.KindHang {
		t.Fatalf("rows %+v\n%s", lt.rows, lt.stderr.String())
	}
	if h := j.of("hang"); len(h) != 1 {
		t.Errorf("hang events %v", h)
	}
}

// --probe torch: the probe's records of the attempt are followed; its OOM
// site reaches the row as the block it struck in.
func TestHookTorchProbeSite(t *testing.T) {
	pt := newHookTestWith(t, func(c *Config) { c.Probe = "torch" }, "", []string{"train.py"}, []string{"PATH=/bin"},
		fakeRun{code: 1, out: []string{oomLine}})
	pt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		p := pt.plans[n-1]
		rec := `{"t":"oom","pid":7,"pass":"forward","module":"Net.blocks.3","error":"CUDA out of memory","block":{"container":"blocks","index":3,"of":8}}` + "\n"
		if err := os.WriteFile(filepath.Join(p.probeRecords, "probe-7.jsonl"), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
		return runFake(fakeRun{code: 1, out: []string{oomLine}}, spec, h)
	}
	j := new(journal).record(pt)
	pt.attempts()
	if b := pt.rows[0].block; b == nil || b.Index != 3 || b.Of != 8 {
		t.Fatalf("block %+v\n%s", b, pt.stderr.String())
	}
	if ends := j.of("probe"); len(ends) != 1 {
		t.Errorf("probe events %v", ends)
	}
}

// newHookTestWith is newHookTest with cfg changed by set before the hooks
// are registered.
func newHookTestWith(t *testing.T, set func(*Config), policy string, argv, env []string, runs ...fakeRun) *loopTest {
	t.Helper()
	lt := newLoopTest(t, policy, argv, env)
	set(&lt.cfg)
	lt.recordPlans()
	lt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		return runFake(runs[n-1], spec, h)
	}
	t.Cleanup(lt.hooks.closeAll)
	if code := lt.register(group.Spec{}, false); code != 0 {
		t.Fatalf("register: %d", code)
	}
	return lt
}

// A command that cannot start ends the run with its status (127), and the
// hooks that started for it stop.
func TestHookStartFailure(t *testing.T) {
	lt := newHookTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		fakeRun{startErr: &Error{Code: 127, Msg: "command not found"}})
	if code := lt.attempts(); code != 127 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
}

// slurmEnv is a Slurm job's environment with the stand-in scontrol
// (slurm_test.go) first on PATH, logging to the returned file.
func slurmEnv(t *testing.T, vars ...string) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "scontrol"), []byte(fakeScontrol), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "scontrol.log")
	return append([]string{"PATH=" + dir + ":/usr/bin:/bin", "FAKE_SCONTROL_LOG=" + log}, vars...), log
}

// Slurm requeue: a requeue signal during an attempt stops relaunches; the
// run ends with the job's status and requeues the job.
func TestHookSlurmRequeue(t *testing.T) {
	env, log := slurmEnv(t, "SLURM_JOB_ID=61")
	lt := newHookTest(t, requeuePolicy+"rules:\n  - name: oom\n    when: {kind: gpu_oom}\n    steps: [{retry: true}]\n",
		[]string{"train.py"}, env)
	// The job gets SIGUSR2 while it runs; the slurm hook has it before the
	// attempt ends.
	stop := lt.hooks.stopper[0].stopC()
	lt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		return runFake(fakeRun{code: 1, out: []string{oomLine}, during: func(p *fakeProc) {
			if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
				t.Error(err)
			}
			<-stop
		}}, spec, h)
	}
	j := new(journal).record(lt)
	if code := lt.attempts(); code != 1 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	data, _ := os.ReadFile(log)
	if strings.TrimSpace(string(data)) != "requeue 61" {
		t.Errorf("scontrol was run with %q", data)
	}
	if d := j.of("decision"); len(d) != 1 || d[0].(record.Decision).Verb != "requeue" {
		t.Errorf("decisions %v", d)
	}
}

// raise_slurm_mem: the job is requeued with a larger memory request, and
// the run ends.
func TestHookSlurmMemRequeues(t *testing.T) {
	env, log := slurmEnv(t, "SLURM_JOB_ID=62", "SLURM_MEM_PER_NODE=4096")
	lt := newHookTest(t, memPolicy, []string{"train.py"}, env,
		fakeRun{code: 1, out: []string{"RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes."}})
	if code := lt.attempts(); code != 1 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	data, _ := os.ReadFile(log)
	if got := strings.TrimSpace(string(data)); got != "requeue 62\nupdate JobId=62 MinMemoryNode=6144" {
		t.Errorf("scontrol was run with %q\n%s", got, lt.stderr.String())
	}
	if len(lt.rows) != 1 || !strings.HasSuffix(lt.rows[0].decision, ", requeued") {
		t.Errorf("rows %+v", lt.rows)
	}
}

// The memo: a run that ended well with other values than the command's
// remembers them.
func TestHookMemoRemembers(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	lt := newHookTest(t, halvePolicy+"memo: true\n", []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		fakeRun{code: 1, out: []string{oomLine}}, fakeRun{})
	lt.applyMemo(lt.status)
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	wantContains(t, "status", lt.stderr.String(), "memo: remembered batch_size=4")
}

// One preparation for the run and the dry run: a dry run of a command that
// cannot run fails as the run does (127), and prints nothing of a plan; one
// that can prints the plan.
func TestDryRunChecksTheCommand(t *testing.T) {
	for _, c := range []struct {
		argv   []string
		policy string
		code   int
		out    string
	}{
		{[]string{"no-such-command-xyz"}, "", 127, ""},
		{[]string{"no-such-command-xyz", "--batch-size", "8"}, halvePolicy, 127, ""},
		{[]string{"sh", "-c", "exit 0"}, "", 0, "command: sh -c 'exit 0' (with pipes)\n"},
		{[]string{"sh", "train.py", "--batch-size", "8"}, halvePolicy, 0,
			"knobs: batch_size=8 grad_accum=1\n"},
	} {
		wd := t.TempDir()
		policy := ""
		if c.policy != "" {
			policy = filepath.Join(wd, "gpuguard.yaml")
			if err := os.WriteFile(policy, []byte(c.policy), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out, err := os.Create(filepath.Join(wd, "stdout"))
		if err != nil {
			t.Fatal(err)
		}
		var errb supervisortest.SyncBuffer
		cfg := Config{Argv: c.argv, DryRun: true, Stdout: out, Stderr: &errb, PTY: "never", Policy: policy}
		l := newLoop(cfg, wd, []string{"PATH=/usr/bin:/bin"}, time.Now())
		code := l.prepare(newStatus(out, &errb))
		out.Close()
		data, _ := os.ReadFile(filepath.Join(wd, "stdout"))
		if code != c.code || (c.out == "") != (len(data) == 0) || !strings.Contains(string(data), c.out) {
			t.Errorf("dry run of %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.argv, code, c.code, data, errb.String())
		}
		if _, err := os.Stat(filepath.Join(wd, ".gpuguard")); err == nil {
			t.Errorf("dry run of %q created .gpuguard", c.argv)
		}
	}
}

// The group: a member's out-of-memory error stops the leader's job (a
// peer's failure), the leader decides from the member's failure, and both
// relaunch with the halved batch.
func TestHookGroupDecidesAsOne(t *testing.T) {
	dir := t.TempDir()
	argv := []string{"train.py", "--batch-size", "8"}
	mk := func(runs ...fakeRun) *loopTest {
		lt := newLoopTest(t, halvePolicy, argv, []string{"PATH=/bin"})
		lt.recordPlans()
		lt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
			if n > len(runs) {
				t.Errorf("attempt %d was started; the test fakes %d", n, len(runs))
				return attemptResult{}, &Error{Code: 1, Msg: "no such attempt"}
			}
			return runFake(runs[n-1], spec, h)
		}
		t.Cleanup(lt.hooks.closeAll)
		return lt
	}
	lts := []*loopTest{
		mk(fakeRun{out: []string{"step 1 loss 0.5"}, untilStopped: true}, fakeRun{}),
		mk(fakeRun{out: []string{"step 1 loss 0.5", oomLine}, code: 1}, fakeRun{}),
	}
	codes := make([]int, len(lts))
	var wg sync.WaitGroup
	for i, lt := range lts {
		spec := group.Spec{Dir: dir, Rank: i, Size: len(lts), Host: "node" + string(rune('0'+i)), Timeout: 20 * time.Second, From: "test"}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if codes[i] = lt.register(spec, true); codes[i] == 0 {
				codes[i] = lt.attempts()
			}
		}()
	}
	wg.Wait()
	for i, lt := range lts {
		if codes[i] != 0 || len(lt.plans) != 2 || !slices.Contains(lt.plans[1].argv, "4") {
			t.Errorf("rank %d: exit %d, plans %+v\n%s", i, codes[i], lt.plans, lt.stderr.String())
		}
	}
	wantContains(t, "the leader's status", lts[0].stderr.String(),
		"group: rank 1 on node1 failed (gpu_oom)", "group: rank 1 on node1 failed first: attempt 1 died of GPU OOM")
	if len(lts[0].rows) < 1 || !lts[0].rows[0].stoppedForPeer {
		t.Errorf("the leader's rows %+v", lts[0].rows)
	}
}

// A job SIGKILLed while its cgroup's OOM-kill counter rose died of host
// memory.
func TestHookCgroupOOMKill(t *testing.T) {
	lt := newHookTest(t, "", []string{"train.py"}, []string{"PATH=/bin"})
	var kills uint64
	for _, h := range lt.hooks.stopped {
		if c, ok := h.(*cgroupOOMHook); ok {
			c.kills = func() (uint64, bool) { return kills, true }
		}
	}
	lt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		p := &fakeProc{done: make(chan struct{})}
		h.Started(p)
		kills++ // the kernel killed a process of the job
		close(p.done)
		res := attemptResult{Code: 137, Signal: syscall.SIGKILL, Start: time.Now(), End: time.Now()}
		h.Ended(res, &record.AttemptEnd{})
		return res, nil
	}
	if code := lt.attempts(); code != 137 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if k := lt.rows[0].verdict.Kind; k != classify.KindHostOOM {
		t.Errorf("verdict %q, want %q", k, classify.KindHostOOM)
	}
}

// docs/hooks.md's worked example is the code: the hook as rejections.go
// has it, registered as loop.go does.
func TestHooksDocIsTheCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/hooks.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for i, part := range strings.Split(string(doc), "```") {
		if i%2 == 1 {
			blocks = append(blocks, strings.TrimPrefix(part, "go\n"))
		}
	}
	src := map[string]string{}
	for _, f := range []string{"rejections.go", "loop.go"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src[f] = string(data)
	}
	if len(blocks) < 2 || !strings.HasSuffix(src["rejections.go"], blocks[0]) {
		t.Errorf("docs/hooks.md's first code block is not the end of rejections.go:\n%s", blocks[0])
	}
	if len(blocks) < 2 || !strings.Contains(src["loop.go"], "\t"+strings.TrimSpace(blocks[1])+"\n") {
		t.Errorf("loop.go does not register the hook as docs/hooks.md says: %q", blocks[1])
	}
}

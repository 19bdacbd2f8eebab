package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/presets"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// Unit tests of the run loop's decisions: which checkpoint a relaunch
// resumes from, the launch it gets, the budgets, the backoff, signals, the
// OOM grace. No process is started: each attempt is a scripted outcome
// (loop.runAttempt), waits are recorded (loop.after), files are real.

// script is what one scripted attempt does: it may write files (a
// checkpoint) and returns how the attempt ended.
type script func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult)

type loopTest struct {
	*loop
	wd     string
	stderr supervisortest.SyncBuffer
	plans  []launchPlan
	waits  []time.Duration
}

// recordPlans makes each attempt the loop's own (runOne, with the test's
// start), recording the launch plan it gets.
func (lt *loopTest) recordPlans() {
	lt.runAttempt = func(n int, p launchPlan) (attemptRow, classify.Verdict, attemptResult, error) {
		lt.plans = append(lt.plans, p)
		return lt.runOne(n, p)
	}
}

// exitWith is an attempt that ended with code and verdict v.
func exitWith(code int, v classify.Verdict) script {
	return func(*testing.T, *loopTest, int, launchPlan) (classify.Verdict, attemptResult) {
		return v, attemptResult{Code: code}
	}
}

var trainOOM = classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain}

// newLoopTest prepares a loop for argv under policy (YAML; "" for none) in
// a fresh directory, as runLoop does but with no process, no signal handler
// and no GPU. The run started an hour ago, so that checkpoints the tests
// write now are of this run and already quiet.
func newLoopTest(t *testing.T, policy string, argv []string, env []string, scripts ...script) *loopTest {
	t.Helper()
	wd := t.TempDir()
	cfg := Config{Argv: argv, Grace: time.Second}
	if policy != "" {
		cfg.Policy = filepath.Join(wd, "gpuguard.yaml")
		if err := os.WriteFile(cfg.Policy, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		cfg.Policy = "none"
	}
	lt := &loopTest{wd: wd}
	lt.loop = newLoop(cfg, wd, env, time.Now().Add(-time.Hour))
	status := newStatus(nil, &lt.stderr)
	if policy == "" {
		lt.cfg.Policy = ""
	}
	if code := lt.loadPolicy(status); code != 0 {
		t.Fatalf("loadPolicy: %d\n%s", code, lt.stderr.String())
	}
	if code := lt.resolveRunDir(status); code != 0 {
		t.Fatalf("resolveRunDir: %d\n%s", code, lt.stderr.String())
	}
	rd, err := createRunDir(filepath.Join(wd, "run"), wd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	lt.job = &Job{Cfg: lt.cfg, Env: env, RunDir: rd, Status: status, Signals: newTestSignals(), Logger: zap.NewNop()}
	lt.status, lt.log, lt.gpu = status, zap.NewNop(), gpu.None("test")
	if lt.pol != nil {
		lt.expandSpec()
	}
	lt.getpid = func() int { return 4242 }
	lt.after = func(d time.Duration) <-chan time.Time {
		lt.waits = append(lt.waits, d)
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	lt.runAttempt = func(n int, p launchPlan) (attemptRow, classify.Verdict, attemptResult, error) {
		lt.plans = append(lt.plans, p)
		if n > len(scripts) {
			t.Fatalf("attempt %d was started; the test scripts %d", n, len(scripts))
		}
		v, res := scripts[n-1](t, lt, n, p)
		return attemptRow{n: n, ckpt: p.ckpt, code: res.Code, verdict: v}, v, res, nil
	}
	return lt
}

// newTestSignals is a signal forwarder with no handler installed.
func newTestSignals() *Signals { return &Signals{termC: make(chan struct{})} }

// terminate makes the forwarder report that gpuguard got sig.
func terminate(s *Signals, sig syscall.Signal) {
	s.mu.Lock()
	s.term = sig
	s.mu.Unlock()
	close(s.termC)
}

// checkpointAt writes a checkpoint file of this run: written after the run's
// start, quiet for longer than the policy's quiet period.
func (lt *loopTest) checkpointAt(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(lt.wd, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Now().Add(-30 * time.Minute)
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
	return p
}

func (lt *loopTest) state(t *testing.T) runState {
	t.Helper()
	return readState(t, lt.job.RunDir.Path())
}

const halvePolicy = `version: 1
knobs:
  batch_size: {flag: --batch-size}
  grad_accum: {flag: --accum, default: 1}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - halve: batch_size
        compensate: grad_accum
        min: 1
budget: {relaunches: 2}
backoff: {initial: 5s, factor: 2, max: 1m, jitter: 0}
checkpoints:
  globs: [ckpt/step_*.pt]
  choose: highest_step
  pass: {flag: --resume}
`

// A training OOM halves the batch, keeps the effective batch, resumes from
// the highest step, waits the backoff, and records the decision.
func TestLoopRelaunchesWithTheDecision(t *testing.T) {
	lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult) {
			lt.checkpointAt(t, "ckpt/step_20.pt")
			lt.checkpointAt(t, "ckpt/step_100.pt")
			return trainOOM, attemptResult{Code: 1}
		},
		exitWith(0, classify.Verdict{}))
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if len(lt.plans) != 2 {
		t.Fatalf("%d attempts", len(lt.plans))
	}
	if got, want := lt.plans[0].argv, []string{"train.py", "--batch-size", "8"}; !slices.Equal(got, want) {
		t.Errorf("attempt 1: %q, want the command as given %q", got, want)
	}
	ckpt := filepath.Join(lt.wd, "ckpt/step_100.pt")
	want := []string{"train.py", "--batch-size", "4", "--accum", "2", "--resume", ckpt}
	if got := lt.plans[1].argv; !slices.Equal(got, want) {
		t.Errorf("attempt 2: %q, want %q", got, want)
	}
	if lt.plans[1].ckpt != ckpt {
		t.Errorf("attempt 2 resumes from %q", lt.plans[1].ckpt)
	}
	for _, kv := range []string{"GPUGUARD_ATTEMPT=2", "GPUGUARD_PID=4242", "GPUGUARD_RUN_DIR=" + lt.job.RunDir.Path(),
		"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"} {
		if !slices.Contains(lt.plans[1].env, kv) {
			t.Errorf("attempt 2's environment lacks %s: %q", kv, lt.plans[1].env)
		}
	}
	if !slices.Equal(lt.waits, []time.Duration{5 * time.Second}) {
		t.Errorf("waited %v, want the first backoff, 5s", lt.waits)
	}
	wantContains(t, "stderr", lt.stderr.String(),
		"attempt 1 died of GPU OOM in training → rule train-oom step 1: batch_size 8→4 (grad_accum 1→2)",
		"resuming from ckpt/step_100.pt",
		"attempt 2: train.py --batch-size 4 --accum 2 --resume ")
	st := lt.state(t)
	if !st.Done || st.ExitCode != 0 || st.Attempt != 2 || st.Policies.Values["batch_size"].String() != "4" {
		t.Errorf("state.json: %+v", st)
	}
}

// The budget ends the run with the job's own status, after as many
// relaunches as it allows.
func TestLoopGivesUpWhenTheBudgetIsSpent(t *testing.T) {
	oom := exitWith(3, trainOOM)
	lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, nil, oom, oom, oom)
	if code := lt.attempts(); code != 3 {
		t.Fatalf("exit %d, want the job's 3\n%s", code, lt.stderr.String())
	}
	if len(lt.plans) != 3 {
		t.Errorf("%d attempts, want 3 (2 relaunches)", len(lt.plans))
	}
	if !slices.Equal(lt.waits, []time.Duration{5 * time.Second, 10 * time.Second}) {
		t.Errorf("waited %v, want 5s then 10s", lt.waits)
	}
	wantContains(t, "stderr", lt.stderr.String(), "attempt 3 died of GPU OOM in training → giving up:")
}

// With required checkpoints and none complete, nothing is relaunched.
func TestLoopRequiresACheckpoint(t *testing.T) {
	pol := strings.Replace(halvePolicy, "pass: {flag: --resume}", "pass: {flag: --resume}\n  required: true", 1)
	lt := newLoopTest(t, pol, []string{"train.py", "--batch-size", "8"}, nil, exitWith(1, trainOOM))
	if code := lt.attempts(); code != 1 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	wantContains(t, "stderr", lt.stderr.String(), "no complete checkpoint to resume from, and the policy requires one: not relaunching")
}

// An earlier run's checkpoint is passed over, once, with the reason; the
// relaunch starts over.
func TestLoopPassesOverAnEarlierRunsCheckpoint(t *testing.T) {
	lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, nil,
		exitWith(1, trainOOM), exitWith(0, classify.Verdict{}))
	old := lt.checkpointAt(t, "ckpt/step_900.pt")
	yesterday := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(old, yesterday, yesterday); err != nil {
		t.Fatal(err)
	}
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if slices.Contains(lt.plans[1].argv, "--resume") {
		t.Errorf("attempt 2 resumes from an earlier run's checkpoint: %q", lt.plans[1].argv)
	}
	out := lt.stderr.String()
	wantContains(t, "stderr", out, "not resuming from ckpt/step_900.pt: it was written before this run started",
		"no checkpoint yet, starting over")
	if n := strings.Count(out, "not resuming from"); n != 1 {
		t.Errorf("said %d times", n)
	}
}

// A terminating signal ends the run after the attempt it stopped, with the
// job's status, and nothing is relaunched.
func TestLoopDoesNotRelaunchAfterASignal(t *testing.T) {
	lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, nil,
		func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult) {
			terminate(lt.job.Signals, syscall.SIGTERM)
			return trainOOM, attemptResult{Code: 143, Signal: syscall.SIGTERM}
		})
	if code := lt.attempts(); code != 143 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	wantContains(t, "stderr", lt.stderr.String(), "attempt 1 stopped by SIGTERM: not relaunching")
	if len(lt.waits) != 0 {
		t.Errorf("waited %v", lt.waits)
	}
}

// Without a policy a memory failure is not relaunched, and the user is told
// how to write one.
func TestLoopWithoutAPolicyRunsOnce(t *testing.T) {
	lt := newLoopTest(t, "", []string{"train.py"}, nil, exitWith(1, trainOOM))
	if code := lt.attempts(); code != 1 {
		t.Fatalf("exit %d", code)
	}
	wantContains(t, "stderr", lt.stderr.String(), "no policy file, so not relaunching (write one with: gpuguard policy init -- train.py)")
}

// A dry run of a run that is to continue plans the next attempt with the
// same code as the attempt itself: what `gpuguard run --dry-run
// --resume-run DIR` shows after a decision is what attempt 2 got.
func TestDryRunPlansWhatTheRelaunchGets(t *testing.T) {
	var dry launchPlan
	var dryN int
	lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin", "HOME=/home/u"},
		func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult) {
			lt.checkpointAt(t, "ckpt/step_50.pt")
			return trainOOM, attemptResult{Code: 1}
		},
		func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult) {
			// state.json holds the decision; plan as a dry run would.
			cfg := lt.cfg
			cfg.ResumeRun, cfg.DryRun = lt.job.RunDir.Path(), true
			dl := newLoop(cfg, lt.wd, lt.pjob.Env, time.Now())
			dl.getpid = lt.getpid
			var errb supervisortest.SyncBuffer
			status := newStatus(nil, &errb)
			if dl.loadPolicy(status) != 0 || dl.resolveRunDir(status) != 0 {
				t.Fatalf("dry run: %s", errb.String())
			}
			dl.status = status
			var err error
			if dryN, _, dry, err = dl.nextPlan(); err != nil {
				t.Fatal(err)
			}
			return classify.Verdict{}, attemptResult{Code: 0}
		})
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	got := lt.plans[1]
	if dryN != 2 || !slices.Equal(dry.argv, got.argv) || !slices.Equal(dry.env, got.env) || dry.ckpt != got.ckpt ||
		!slices.Equal(dry.notes, got.notes) || len(dry.files) != len(got.files) {
		t.Errorf("the dry run plans attempt %d\n %q\n %q\n%q\nattempt 2 got\n %q\n %q\n%q", dryN, dry.argv, dry.env, dry.ckpt, got.argv, got.env, got.ckpt)
	}
	if !slices.Contains(got.argv, filepath.Join(lt.wd, "ckpt/step_50.pt")) {
		t.Errorf("attempt 2 does not resume: %q", got.argv)
	}
}

// fakeAttempt is a running attempt for the OOM grace watch.
type fakeAttempt struct {
	done    chan struct{}
	mu      sync.Mutex
	stopped string
}

func (f *fakeAttempt) Done() <-chan struct{} { return f.done }
func (f *fakeAttempt) Stop(reason string) {
	f.mu.Lock()
	f.stopped = reason
	f.mu.Unlock()
}

// After an OOM line the job gets oom_grace to exit; it is stopped when it
// neither exits nor trains on, and left alone when it trains on.
func TestOOMGrace(t *testing.T) {
	cases := []struct {
		name       string
		stepsSince int64
		recovered  bool
		exits      bool
		stopped    bool
	}{
		{"hangs after the error", 0, false, false, true},
		{"one step is not training on", 1, false, false, true},
		{"trains on", 2, false, false, false},
		{"says it recovered, no step yet", 0, true, false, false},
		{"exits within the grace", 0, false, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lt := newLoopTest(t, "", []string{"train.py"}, nil)
			a := &fakeAttempt{done: make(chan struct{})}
			fire := make(chan time.Time)
			asked := make(chan time.Duration, 4)
			lt.after = func(d time.Duration) <-chan time.Time { asked <- d; return fire }
			failed := make(chan struct{}, 1)
			failed <- struct{}{}
			returned := make(chan struct{})
			go func() {
				lt.watchOOMGrace(a, failed, 30*time.Second, func() bool { return wentOn(c.stepsSince, c.recovered) })
				close(returned)
			}()
			// The watch waits a second, says it waits, then waits the rest.
			if d := <-asked; d != time.Second {
				t.Errorf("first wait %v, want 1s", d)
			}
			fire <- time.Time{}
			if d := <-asked; d != 29*time.Second {
				t.Errorf("then %v, want the rest of the 30s grace", d)
			}
			if c.exits {
				close(a.done)
			} else {
				fire <- time.Time{}
				if !c.stopped {
					close(a.done) // ends the watch, which waits for the next error
				}
			}
			<-returned
			a.mu.Lock()
			stopped := a.stopped != ""
			a.mu.Unlock()
			if stopped != c.stopped {
				t.Errorf("stopped %v (%q), want %v", stopped, a.stopped, c.stopped)
			}
			if len(asked) != 0 {
				t.Errorf("%d more grace timers", len(asked))
			}
			if c.stopped {
				wantContains(t, "stderr", lt.stderr.String(),
					"the job has not exited 1s after its out-of-memory error: waiting up to 29s more (oom_grace), then stopping it",
					"the job did not exit within 30s of its out-of-memory error: stopping it")
			}
			if said := strings.Contains(lt.stderr.String(), "waiting up to"); said != !wentOn(c.stepsSince, c.recovered) {
				t.Errorf("announced the wait: %v, with %d steps since the error (recovered: %v)", said, c.stepsSince, c.recovered)
			}
		})
	}
}

// A checkpoint the job finished writing just before it died is inside its
// quiet period. Once the job's processes are all gone nothing can change
// it, so the relaunch takes it at once; while a process survives, the loop
// waits for the quiet period and says so.
func TestLoopTakesASettledCheckpointWithoutWaiting(t *testing.T) {
	for _, survivors := range []int{0, 1} {
		t.Run(fmt.Sprintf("survivors=%d", survivors), func(t *testing.T) {
			var ckpt string
			lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, nil,
				func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult) {
					ckpt = lt.checkpointAt(t, "ckpt/step_100.pt")
					// quiet is 10s: inside it, and out of it a second later.
					when := time.Now().Add(-9 * time.Second)
					if err := os.Chtimes(ckpt, when, when); err != nil {
						t.Fatal(err)
					}
					return trainOOM, attemptResult{Code: 1, Survivors: survivors}
				},
				exitWith(0, classify.Verdict{}))
			if code := lt.attempts(); code != 0 {
				t.Fatalf("exit %d\n%s", code, lt.stderr.String())
			}
			polls := 0
			for _, d := range lt.waits {
				if d == 200*time.Millisecond {
					polls++
				}
			}
			out := lt.stderr.String()
			if survivors == 0 {
				if polls != 0 || strings.Contains(out, "waiting up to") {
					t.Errorf("waited for the checkpoint (%d polls) though the job's processes are gone:\n%s", polls, out)
				}
				if lt.plans[1].ckpt != ckpt {
					t.Errorf("attempt 2 resumes from %q, want %q", lt.plans[1].ckpt, ckpt)
				}
				return
			}
			if polls == 0 {
				t.Errorf("did not wait for the quiet period while a process of the job survives")
			}
			wantContains(t, "stderr", out, "waiting up to 20s for ckpt/step_100.pt to be complete (last change ")
		})
	}
}

// A step whose change the launch does not show is not a relaunch: the rule
// goes on to its next step, and the relaunch it counted is not counted.
// Here the policy is made blind to gpuguard's allocator settings (as it was
// until the loop gave it the job's real environment), so its first step,
// merge_env expandable_segments:True, changes nothing the job gets.
func TestLoopSkipsAStepThatChangesNothing(t *testing.T) {
	const pol = `version: 1
knobs:
  batch_size: {flag: --batch-size}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
      - halve: batch_size
        min: 1
budget: {relaunches: 3}
backoff: {initial: 0s}
`
	lt := newLoopTest(t, pol, []string{"train.py", "--batch-size", "8"}, []string{"PATH=/bin"},
		exitWith(1, trainOOM), exitWith(0, classify.Verdict{}))
	lt.pjob.Env = []string{"PATH=/bin"} // blind to the injection
	if code := lt.loadPolicy(lt.status); code != 0 {
		t.Fatal(code)
	}
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if got, want := lt.plans[1].argv, []string{"train.py", "--batch-size", "4"}; !slices.Equal(got, want) {
		t.Errorf("attempt 2: %q, want %q", got, want)
	}
	wantContains(t, "stderr", lt.stderr.String(),
		"rule train-oom step 1 (PYTORCH_CUDA_ALLOC_CONF unset→expandable_segments:True) would relaunch the job unchanged: trying the rule's next step",
		"attempt 1 died of GPU OOM in training → rule train-oom step 2: batch_size 8→4")
	if st := lt.state(t); st.Policies.Relaunches != 1 {
		t.Errorf("relaunches counted %d, want 1", st.Policies.Relaunches)
	}
}

// No built-in preset relaunches a job unchanged: for each failure a preset
// handles, every relaunch it decides, step after step until it gives up,
// changes the next attempt's command, environment or derived configs (a
// retry, which changes nothing on purpose, aside).
func TestNoPresetRelaunchesUnchanged(t *testing.T) {
	commands := map[string][]string{
		"argparse":    {"python", "train.py", "--batch-size", "64", "--grad-accum", "1", "--val-batch-size", "32", "--num-workers", "8"},
		"lightning":   {"python", "main.py", "fit", "--data.batch_size", "64", "--data.num_workers", "8"},
		"huggingface": {"torchrun", "--nproc_per_node", "2", "run_clm.py", "--output_dir", "out", "--per_device_train_batch_size", "16"},
		"ultralytics": {"yolo", "train", "model=yolo11n.pt", "data=coco8.yaml", "batch=32", "workers=8"},
		"hydra":       {"python", "src/train.py", "data.batch_size=64", "trainer=gpu"},
	}
	failures := map[string]classify.Verdict{
		"train OOM":     {Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain},
		"val OOM":       {Kind: classify.KindGPUOOM, Phase: classify.PhaseVal},
		"fragmentation": {Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain, Fragmentation: true},
		"host OOM":      {Kind: classify.KindHostOOM, Phase: classify.PhaseTrain},
		"CPU allocator": {Kind: classify.KindCPUAllocOOM, Phase: classify.PhaseTrain},
		// With figures, fit steps set the batch from them (and from the
		// phase's start, below) instead of halving: a large request, and
		// one layer of a series.
		"train OOM, figures": {Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain,
			OOM: &classify.OOM{TotalBytes: ptr64(80 << 30), FreeBytes: ptr64(2 << 30), RequestedBytes: ptr64(30 << 30)}},
		"train OOM, a layer": {Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain,
			OOM: &classify.OOM{TotalBytes: ptr64(80 << 30), FreeBytes: ptr64(1 << 30), RequestedBytes: ptr64(2 << 30)}},
	}
	for _, name := range presets.Names() {
		argv, ok := commands[name]
		if !ok {
			t.Errorf("preset %s: no command to try it with", name)
			continue
		}
		for fname, v := range failures {
			t.Run(name+"/"+fname, func(t *testing.T) {
				lt := newLoopTest(t, "", argv, []string{"PATH=/bin"})
				lt.cfg.Policy = name
				if code := lt.loadPolicy(lt.status); code != 0 || lt.pol == nil {
					t.Fatalf("preset %s: %d\n%s", name, code, lt.stderr.String())
				}
				st := lt.state0()
				src, _ := presets.Lookup(name)
				wantFit := v.OOM != nil && strings.Contains(string(src), "- fit: batch_size")
				for n := 1; n <= 20; n++ {
					d := lt.pol.Decide(st, policy.Outcome{Verdict: v, Exit: classify.Exit{Code: 1}, Attempt: n,
						Starts: map[classify.Phase]float64{classify.PhaseTrain: 0.25}})
					if strings.Contains(d.Describe(), "batch_size") && strings.Contains(d.Describe(), "fit: ") {
						if v.OOM != nil && strings.Contains(d.Describe(), "figures are unusable") {
							t.Errorf("attempt %d: fit did not use the figures: %s", n, d.Describe())
						}
						wantFit = false
					}
					if d.Verb != policy.Relaunch {
						if wantFit {
							t.Errorf("preset %s has a fit step, and no decision used it", name)
						}
						return
					}
					if len(d.Changes) > 0 && !lt.changesLaunch(n+1, st.Values, d.State.Values) {
						t.Fatalf("attempt %d: rule %s step %d (%v) relaunches the job unchanged", n, d.Rule, d.Step, d.Changes)
					}
					st = d.State
				}
			})
		}
	}
}

// state0 is the policy state the loop starts from.
func (lt *loopTest) state0() policy.State { return lt.loop.state.Policies }

// An attempt ended by Ctrl-C is "interrupted" in the attempts table, not a
// crash, whatever its last words (Python prints KeyboardInterrupt's
// traceback, which reads as a crash).
func TestLoopSaysInterruptedForCtrlC(t *testing.T) {
	crash := classify.Verdict{Kind: classify.KindCrash, Reason: "KeyboardInterrupt"}
	for _, c := range []struct {
		sig  syscall.Signal
		want string
	}{{syscall.SIGINT, "interrupted (exit 130)"}, {syscall.SIGTERM, "stopped by SIGTERM (exit 143)"}} {
		lt := newLoopTest(t, halvePolicy, []string{"train.py", "--batch-size", "8"}, nil,
			func(t *testing.T, lt *loopTest, n int, p launchPlan) (classify.Verdict, attemptResult) {
				terminate(lt.job.Signals, c.sig)
				return crash, attemptResult{Code: 128 + int(c.sig)}
			})
		if code := lt.attempts(); code != 128+int(c.sig) {
			t.Fatalf("exit %d\n%s", code, lt.stderr.String())
		}
		wantContains(t, "stderr", lt.stderr.String(), "  1        "+c.want)
		if strings.Contains(lt.stderr.String(), "crash (exit") {
			t.Errorf("the table calls it a crash:\n%s", lt.stderr.String())
		}
	}
}

func ptr64(v int64) *int64 { return &v }

// After an OOM, only steps past the furthest one printed before it show
// that the job went on: a launcher's late copy of earlier steps does not.
func TestStepProgress(t *testing.T) {
	g := classify.StepGlobal
	ie := classify.StepInEpoch
	step := func(kind classify.StepKind, s, epoch int64) classify.Event {
		return classify.Event{Type: classify.EventStep, Step: s, StepKind: kind, Epoch: epoch}
	}
	for _, tc := range []struct {
		name   string
		before []classify.Event
		after  classify.Event
		want   bool
	}{
		{"the next step", []classify.Event{step(g, 5, -1)}, step(g, 6, -1), true},
		{"a late copy of a step before the error", []classify.Event{step(g, 4, -1), step(g, 5, -1)}, step(g, 4, -1), false},
		{"the same step again", []classify.Event{step(g, 5, -1)}, step(g, 5, -1), false},
		{"a new epoch, its first batch", []classify.Event{step(ie, 900, 2)}, step(ie, 1, 3), true},
		{"a batch of the same epoch printed late", []classify.Event{step(ie, 900, 2)}, step(ie, 899, 2), false},
		{"a counter not seen before the error", []classify.Event{step(ie, 900, 2)}, step(g, 10, 2), true},
		{"no step before the error", nil, step(g, 1, -1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p stepProgress
			for _, ev := range tc.before {
				p.step(ev)
			}
			p.failed()
			if got := p.step(tc.after); got != tc.want {
				t.Errorf("step(%+v) after the error = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
}

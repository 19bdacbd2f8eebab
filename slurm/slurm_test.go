package slurm_test

// Integration tests against a real one-node Slurm cluster.
//
// TestMain starts a private cluster with start-local-slurm.sh (its own
// state directory under the temp dir, free ports, node name gg<port>, so it
// shares nothing with another cluster on the machine), builds gpuguard, runs
// the tests and stops the cluster with stop-local-slurm.sh --purge. It needs
// root (slurmd starts jobs as their users); when the Slurm packages are
// missing the start script installs them with apt (about 10 s). Without root
// the tests skip, saying why. Environment:
//
//	GPUGUARD_SLURM=off        skip these tests
//	GPUGUARD_SLURM=require    fail, not skip, when they cannot run (CI; -short still skips)
//	GPUGUARD_SLURM_CONF=FILE  use the running test cluster of this slurm.conf
//	                          instead of starting one (it must run jobs as root
//	                          and have a free CPU or two; never a production
//	                          cluster: the tests submit jobs and cancel them)
//
// Jobs run in t.TempDir() directories; every job a test submits is cancelled
// when the test ends if it is still in the queue. The harness (TestMain's
// rules, submitting and waiting for jobs, the run directory's journal) is
// slurm/internal/slurmtest, which slurm/multinode's tests share; this file
// keeps what is specific to the one-node cluster.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// cl is the cluster the tests use.
var cl = struct {
	slurmtest.Cluster
	node string // the node's name
}{Cluster: slurmtest.Cluster{Name: "Slurm"}}

func TestMain(m *testing.M) {
	os.Exit(cl.Main(m, slurmtest.Setup{
		Root:  "..",
		Short: "-short: the Slurm tests submit real jobs (about two minutes)",
		Start: startCluster,
	}))
}

// startCluster starts the private cluster (or checks GPUGUARD_SLURM_CONF's)
// and returns what stops it; code is non-zero when the tests cannot run
// although they should.
func startCluster() (stop func() error, code int) {
	if c := os.Getenv("GPUGUARD_SLURM_CONF"); c != "" {
		if err := setConf(c); err != nil {
			fmt.Fprintf(os.Stderr, "GPUGUARD_SLURM_CONF=%s: %v\n", c, err)
			return nil, 1
		}
		if out, err := cl.Command("", "scontrol", "ping").CombinedOutput(); err != nil || !strings.Contains(string(out), "is UP") {
			fmt.Fprintf(os.Stderr, "GPUGUARD_SLURM_CONF=%s: slurmctld does not answer scontrol ping: %v %s\n", c, err, out)
			return nil, 1
		}
		return nil, 0
	}
	if os.Geteuid() != 0 {
		cl.Skip = "not root: the tests start a private Slurm cluster, and slurmd must run as root; run them as root, or set GPUGUARD_SLURM_CONF to a test cluster's slurm.conf"
		return nil, 0
	}
	if _, err := exec.LookPath("bash"); err != nil {
		cl.Skip = "no bash to run slurm/start-local-slurm.sh"
		return nil, 0
	}
	dir, err := os.MkdirTemp("", "gg-slurm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, 1
	}
	ports, err := slurmtest.FreePorts(2)
	if err != nil {
		fmt.Fprintln(os.Stderr, "no free ports for slurmctld and slurmd:", err)
		return nil, 1
	}
	ctld, slurmd := ports[0], ports[1]
	p := cl.Private("start-local-slurm.sh", "stop-local-slurm.sh", dir, append(os.Environ(),
		"LOCAL_SLURM_DIR="+dir,
		fmt.Sprintf("LOCAL_SLURM_NODE=gg%d", ctld),
		fmt.Sprintf("LOCAL_SLURM_CTLD_PORT=%d", ctld),
		fmt.Sprintf("LOCAL_SLURM_SLURMD_PORT=%d", slurmd),
		// More CPUs than the machine has, so that the tests' jobs run side
		// by side (they mostly wait).
		"LOCAL_SLURM_CPUS=8",
	))
	if stderr, err := p.Start(); err != nil {
		return p.Stop, p.Failed(stderr, err)
	}
	if err := setConf(filepath.Join(dir, "etc", "slurm.conf")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return p.Stop, 1
	}
	return p.Stop, 0
}

// setConf makes conf the tests' slurm.conf and reads the node's name.
func setConf(conf string) error {
	text, err := cl.SetConf(conf)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "NodeName="); ok {
			cl.node, _, _ = strings.Cut(rest, " ")
		}
	}
	return nil
}

// workDir is a new job directory holding a copy of examples/ and of the
// test programs in testdata/.
func workDir(t testing.TB) string {
	t.Helper()
	dir := slurmtest.JobDir(t)
	if err := os.Mkdir(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"train.py", "config.yaml", "gpuguard.yaml"} {
		slurmtest.CopyFile(t, filepath.Join(cl.Root, "examples", f), filepath.Join(dir, "examples", f))
	}
	slurmtest.CopyDir(t, filepath.Join(cl.Root, "slurm", "testdata"), dir)
	return dir
}

// digest is the weights digest the example job prints at its end.
func digest(t *testing.T, output string) string {
	t.Helper()
	i := strings.LastIndex(output, "weights sha256 ")
	if i < 0 {
		t.Fatalf("the example job did not finish: no weights digest in its output:\n%s", slurmtest.LastLines(output, 30))
	}
	return strings.Fields(output[i+len("weights sha256 "):])[0]
}

var reference struct {
	once   sync.Once
	digest string
	err    error
}

// referenceDigest is the digest of the example job run straight through with
// settings that fit: what every recovered run must end with.
func referenceDigest(t *testing.T) string {
	t.Helper()
	reference.once.Do(func() {
		dir := workDir(t)
		cmd := exec.Command("python3", "examples/train.py", "--config", "examples/config.yaml", "--batch-size", "16", "--grad-accum", "2")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "VAL_CROP_SIZE=512")
		out, err := cmd.CombinedOutput()
		if err != nil {
			reference.err = fmt.Errorf("the example job with fitting settings failed: %v\n%s", err, out)
			return
		}
		i := strings.LastIndex(string(out), "weights sha256 ")
		if i < 0 {
			reference.err = fmt.Errorf("no digest in:\n%s", out)
			return
		}
		reference.digest = strings.Fields(string(out)[i+len("weights sha256 "):])[0]
	})
	if reference.err != nil {
		t.Fatal(reference.err)
	}
	return reference.digest
}

const exampleCmd = "python3 examples/train.py --config examples/config.yaml"

// The example job as shipped runs out of memory in validation, then in
// training. Under `gpuguard run -- srun ...` in the batch script, each
// attempt is a new job step of the same allocation: the job recovers without
// going back to the queue, and Slurm sees it complete.
func TestStepOOMRecoveredByRelaunchingTheStep(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
exec %s run --policy examples/gpuguard.yaml -- srun %s
`, cl.GG, exampleCmd))
	info := cl.WaitEnd(t, id, 3*time.Minute)
	out := slurmtest.ReadFile(t, filepath.Join(dir, "job.out"))
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	starts := slurmtest.Events(t, runDir, "attempt_start")
	if len(starts) != 3 {
		t.Fatalf("%d attempts, want 3:\n%s", len(starts), out)
	}
	for _, s := range starts {
		if argv, _ := s["argv"].([]any); len(argv) == 0 || argv[0] != "srun" {
			t.Errorf("attempt %v did not run srun: %v", s["attempt"], s["argv"])
		}
	}
	vs := slurmtest.Verdicts(t, runDir)
	if got := strings.Join(slurmtest.Kinds(vs), ","); got != "gpu_oom,gpu_oom,none" {
		t.Errorf("verdicts %s, want gpu_oom,gpu_oom,none:\n%s", got, out)
	}
	if vs[0]["phase"] != "val" || vs[1]["phase"] != "train" {
		t.Errorf("phases %v and %v, want val and train", vs[0]["phase"], vs[1]["phase"])
	}
	slurmtest.WantContains(t, "the job's output", out,
		"gpuguard: Slurm job "+id,
		"attempt 1 died of GPU OOM in validation",
		"attempt 2 died of GPU OOM in training",
		"attempt 3: srun python3 examples/train.py --config "+runDir+"/derived/attempt-3/config.yaml --resume ")
	if got, want := digest(t, out), referenceDigest(t); got != want {
		t.Errorf("weights digest %s, want %s (the run straight through with settings that fit)", got, want)
	}
}

// `srun gpuguard run -- python ...`: gpuguard is the step's task and
// relaunches the training process inside its step; its run directory is
// keyed by the job id.
func TestGpuguardAsTheStepTask(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
srun %s run --policy examples/gpuguard.yaml -- %s
`, cl.GG, exampleCmd))
	info := cl.WaitEnd(t, id, 3*time.Minute)
	out := slurmtest.ReadFile(t, filepath.Join(dir, "job.out"))
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	sl := slurmtest.Events(t, runDir, "slurm")
	if len(sl) != 1 || sl[0]["step_id"] != "0" || sl[0]["job_id"] != id || sl[0]["node"] != cl.node {
		t.Errorf("slurm event %v, want job %s step 0 on node %s", sl, id, cl.node)
	}
	if got := strings.Join(slurmtest.Kinds(slurmtest.Verdicts(t, runDir)), ","); got != "gpu_oom,gpu_oom,none" {
		t.Errorf("verdicts %s, want gpu_oom,gpu_oom,none:\n%s", got, out)
	}
	if got, want := digest(t, out), referenceDigest(t); got != want {
		t.Errorf("weights digest %s, want %s", got, want)
	}
}

// Two ranks under srun --label: rank 1 runs out of memory, rank 0 hangs (a
// collective its peer never joins). gpuguard names rank 1, stops the whole
// step oom_grace after the OOM line, and relaunches it with a smaller batch.
func TestRankOOMStopsTheStepAndRelaunches(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -n 2
#SBATCH -o job.out
exec %s run --policy ranks.yaml -- srun -n2 --label python3 ranks.py --batch 64
`, cl.GG))
	info := cl.WaitEnd(t, id, 2*time.Minute)
	out := slurmtest.ReadFile(t, filepath.Join(dir, "job.out"))
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	vs := slurmtest.Verdicts(t, runDir)
	if len(vs) != 2 || vs[0]["kind"] != "gpu_oom" || vs[0]["rank"] != float64(1) {
		t.Fatalf("verdicts %v, want a gpu_oom on rank 1 then success:\n%s", vs, out)
	}
	ends := slurmtest.Events(t, runDir, "attempt_end")
	if ends[0]["stopped_by_us"] != true || ends[0]["stop_reason"] != "no exit within oom_grace (1s) after an out-of-memory error" {
		t.Errorf("attempt 1 was not stopped after oom_grace: %v", ends[0])
	}
	slurmtest.WantContains(t, "the job's output", out,
		"attempt 1 died of GPU OOM in training on rank 1",
		"the job did not exit within 1s of its out-of-memory error: stopping it",
		"attempt 2: srun -n2 --label python3 ranks.py --batch 32",
		"0: rank 0 done", "1: rank 1 done")
	// The host of the failing rank: srun names it in "srun: error: HOST:
	// task 1: Exited with exit code 1".
	if vs[0]["host"] != cl.node {
		t.Errorf("verdict host of rank 1: %q, want the node %q named by srun", vs[0]["host"], cl.node)
	}
	if oom, launch := slurmtest.Stamp(out, "1: rank 1 oom at "), slurmtest.Stamp(out[strings.Index(out, "attempt 2:"):], "1: rank 1 launched at "); oom > 0 && launch > 0 {
		t.Logf("from rank 1's OOM line to its relaunch in the next step: %.2f s (oom_grace 1 s, srun's teardown, a new step)", launch-oom)
	}
}

// Host memory under the job's --mem (cgroup mode): in a job step, Slurm's
// cgroup OOM killer and its "Out Of Memory" / "oom-kill event" messages make
// a host OOM; gpuguard halves the allocation and the job completes. In the
// batch step itself, gpuguard sees the SIGKILL and the cgroup's OOM counter
// and recovers too, but Slurm then reports the whole job OUT_OF_MEMORY.
func TestHostOOMUnderTheCgroupLimit(t *testing.T) {
	cl.Need(t)
	if !cl.Cgroup {
		t.Skip("the cluster runs without cgroups (proctrack/linuxproc): --mem is not enforced")
	}
	t.Parallel()
	for _, tc := range []struct {
		name, launch, state, exit string
	}{
		{"job step", "srun ", "COMPLETED", "0:0"},
		{"batch step", "", "OUT_OF_MEMORY", "0:125"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH --mem=300M
#SBATCH -o job.out
%s run --policy mem.yaml -- %spython3 alloc.py --mb 800
echo "gpuguard exit status $?"
`, cl.GG, tc.launch))
			info := cl.WaitEnd(t, id, 2*time.Minute)
			out := slurmtest.ReadFile(t, filepath.Join(dir, "job.out"))
			slurmtest.WantState(t, info, tc.state, tc.exit)
			runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
			vs := slurmtest.Verdicts(t, runDir)
			if got := strings.Join(slurmtest.Kinds(vs), ","); got != "host_oom,host_oom,none" {
				t.Fatalf("verdicts %s, want host_oom,host_oom,none (800 → 400 → 200 MiB under 300M):\n%s", got, out)
			}
			slurmtest.WantContains(t, "the job's output", out, "gpuguard exit status 0", "holding 200 MiB", "attempt 3: "+tc.launch+"python3 alloc.py --mb 200")
			if tc.launch != "" {
				slurmtest.WantContains(t, "the job's output", out, "task 0: Out Of Memory", "oom-kill event")
				if vs[0]["host"] != cl.node {
					t.Errorf("verdict host %q, want the node %q named by srun", vs[0]["host"], cl.node)
				}
			}
		})
	}
}

// Signals from scancel reach the training process through gpuguard: with
// `exec gpuguard run` the batch shell is gpuguard (scancel --batch); with
// `srun gpuguard run` gpuguard is the step's task (scancel without options).
// A plain scancel (SIGTERM) ends the job: gpuguard passes it on, relaunches
// nothing, and exits with the job's status. (The run directory is checked
// rather than the job's output: under srun, Slurm may end the batch shell
// and srun before the step's last lines reach the output file.)
func TestScancelSignalsReachTheJob(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	for _, tc := range []struct {
		name, launch string
		opts         []string
	}{
		{"exec gpuguard in the batch script", "exec " + cl.GG, []string{"--batch"}},
		{"srun gpuguard", "srun " + cl.GG, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
%s run -- python3 signals.py signals.txt
`, tc.launch))
			sigs := filepath.Join(dir, "signals.txt")
			slurmtest.WaitFile(t, sigs, "ready", time.Minute)
			for _, sig := range []string{"USR1", "USR2"} {
				cl.Run(t, dir, "scancel", append(append([]string{"--signal=" + sig}, tc.opts...), id)...)
				slurmtest.WaitFile(t, sigs, sig, 30*time.Second)
			}
			cl.Run(t, dir, "scancel", id)
			info := cl.WaitEnd(t, id, time.Minute)
			if info["JobState"] != "CANCELLED" {
				t.Errorf("JobState=%s, want CANCELLED", info["JobState"])
			}
			got := slurmtest.ReadFile(t, sigs)
			if !recordedOnce(got, cl.Cgroup, "ready", "USR1", "USR2", "TERM") {
				t.Errorf("the job recorded %q, want ready, USR1, USR2, TERM once each (twice at most without cgroups)", got)
			}
			runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
			ends := slurmtest.Events(t, runDir, "attempt_end")
			if len(ends) != 1 || ends[0]["exit_code"] != float64(143) {
				t.Errorf("attempts %v, want one that exited 143", ends)
			}
			if re := slurmtest.Events(t, runDir, "run_end"); len(re) != 1 || re[0]["exit_code"] != float64(143) {
				t.Errorf("run_end %v, want gpuguard's exit status 143", re)
			}
			var forwarded []string
			for _, ev := range slurmtest.Events(t, runDir, "signal") {
				forwarded = append(forwarded, fmt.Sprint(ev["signal"], " ", ev["action"]))
			}
			if got := strings.Join(forwarded, ", "); got != "SIGUSR1 forwarded, SIGUSR2 forwarded, SIGTERM forwarded" {
				t.Errorf("signal events: %s", got)
			}
			if tc.opts != nil {
				// Without cgroups Slurm's own SIGTERM can reach the job
				// while it exits after gpuguard's, and end it.
				exited := "the job exited with status 143"
				if !cl.Cgroup {
					exited = "status 143"
				}
				slurmtest.WantContains(t, "the job's output", slurmtest.ReadFile(t, filepath.Join(dir, "job.out")),
					"SIGTERM passed to the job", exited)
			}
		})
	}
}

// recordedOnce reports whether the lines of got are want, in this order,
// each once; with exact false (proctrack/linuxproc, where Slurm signals
// every process of the job and gpuguard passes the signal on too) each may
// come twice.
func recordedOnce(got string, exact bool, want ...string) bool {
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if exact {
		return slices.Equal(lines, want)
	}
	count := map[string]int{}
	var order []string
	for _, l := range lines {
		if count[l] == 0 {
			order = append(order, l)
		}
		count[l]++
		if count[l] > 2 {
			return false
		}
	}
	return slices.Equal(order, want)
}

// A job that Slurm ends (a plain scancel here: the same SIGTERM a time limit
// or a preemption sends) while it recovers from an OOM: gpuguard passes the
// signal on, the example job saves a checkpoint of its last step and exits,
// and gpuguard requeues the job (the policy lists SIGTERM). The requeued job
// finds its run directory, continues at the next attempt with the
// validation crop the first OOM taught and from the checkpoint written at
// the signal, recovers from the training OOM, and completes; its weights are
// those of a run that never stopped.
func TestRequeueContinuesWithTheSettingsThatFit(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	pol := slurmtest.ReadFile(t, filepath.Join(dir, "examples", "gpuguard.yaml")) + "\nslurm:\n  requeue_on: [SIGUSR2, SIGTERM]\n  stop_after: 30s\n"
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
export EXAMPLE_STEP_MS=40
exec %s run --policy policy.yaml -- %s
`, cl.GG, exampleCmd))
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	// Attempt 2 (after the validation OOM at step 50) is training: end the
	// job there.
	slurmtest.WaitFile(t, filepath.Join(runDir, "output.log"), "step 60 ", 2*time.Minute)
	cl.Run(t, dir, "scancel", id)
	cl.WaitJob(t, id, time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info := cl.WaitEnd(t, id, 3*time.Minute)
	out := slurmtest.ReadFile(t, filepath.Join(dir, "job.out"))
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	// The checkpoint the job saved on SIGTERM is where the requeued job
	// resumed.
	saved := int(slurmtest.Stamp(out, "SIGTERM received: checkpoint of step "))
	if saved <= 50 || saved >= 100 {
		t.Fatalf("the job saved no checkpoint between steps 50 and 100 on SIGTERM:\n%s", out)
	}
	ckpt := fmt.Sprintf(".gpuguard/example/step_%d.ckpt", saved)
	slurmtest.WantContains(t, "the job's output", out,
		"SIGTERM: no more relaunches here",
		"attempt 2 ended (exit status 143) after SIGTERM: not relaunching here, the job is requeued",
		// scancel's SIGTERM is not a failure: counted apart, carried on.
		"attempt 2 ended on SIGTERM from outside (a preemption, scontrol requeue, scancel or the end of the allocation): not a failure; 1 such stop so far counted apart, not against the failure budgets (relaunches used: 1 of ",
		"(budgets carried over (Slurm requeue)); 1 such stop so far from outside (preemptions, requeues), not counted against the budgets",
		"requeued Slurm job "+id+" after SIGTERM (scontrol requeue "+id+")",
		"restart 1",
		"resuming run "+runDir+" at attempt 3 with batch_size=32 env:PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True grad_accum=1 val_crop_size=512 workers=4 (budgets carried over (Slurm requeue))",
		"attempt 3: "+exampleCmd+" --resume "+filepath.Join(dir, ckpt),
		"resumed from "+filepath.Join(dir, ckpt),
		"val_crop_size=512",
		"attempt 3 died of GPU OOM in training",
		"training complete")
	starts := slurmtest.Events(t, runDir, "attempt_start")
	if len(starts) != 4 {
		t.Errorf("%d attempts over both runs, want 4", len(starts))
	}
	req := slurmtest.Events(t, runDir, "requeue")
	if len(req) != 1 || req[0]["result"] != "requeued" {
		t.Errorf("requeue events %v", req)
	}
	if got, want := digest(t, out), referenceDigest(t); got != want {
		t.Errorf("weights digest %s, want %s", got, want)
	}
}

// Slurm's own warning before the time limit (#SBATCH --signal=B:USR2@59 on
// a one-minute job) reaches gpuguard, which passes it on and requeues the
// array task in its ARRAY_TASK form; the second run, with
// SLURM_RESTART_COUNT=1, finds its run directory and completes. Slurm checks
// time limits about every 30 s, so this test takes up to a minute.
func TestTimeLimitSignalRequeuesAnArrayTask(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("version: 1\nslurm: {requeue_on: [SIGUSR2], max_requeues: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	arrayID := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job-%%a.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --time=1
#SBATCH --signal=B:USR2@59
exec %s run --policy policy.yaml -- python3 signals.py signals.txt --exit-on USR2
`, cl.GG), "--array=3")
	id := arrayID + "_3"
	t.Cleanup(func() { cl.Cancel(t, id) })
	cl.WaitJob(t, id, 2*time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info := cl.WaitEnd(t, id, 2*time.Minute)
	out := slurmtest.TryRead(filepath.Join(dir, "job-3.out"))
	defer func() {
		if t.Failed() {
			t.Logf("the job's output:\n%s", out)
		}
	}()
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	if info["Restarts"] != "1" {
		t.Errorf("Restarts=%s, want 1", info["Restarts"])
	}
	// Slurm may send the warning before Python has installed its handler
	// (its time-limit check runs when it will): then SIGUSR2's default
	// action ends the first run's process, which is what a job without a
	// handler gets, and only the restart is recorded.
	switch got := slurmtest.TryRead(filepath.Join(dir, "signals.txt")); got {
	case "ready\nUSR2\nrestarted 1\n":
	case "restarted 1\n":
		t.Logf("Slurm's SIGUSR2 came before the job had its handler")
	default:
		t.Errorf("the job recorded %q, want ready, USR2, then its restart", got)
	}
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	// (Slurm's SIGTERM that ends the first run after `scontrol requeue`
	// finds no job running: slurmtest.Event action "no job".)
	var forwarded []string
	for _, ev := range slurmtest.Events(t, runDir, "signal") {
		if ev["action"] == "forwarded" {
			forwarded = append(forwarded, fmt.Sprint(ev["signal"]))
		}
	}
	if got := strings.Join(forwarded, ", "); got != "SIGUSR2" {
		t.Errorf("signals forwarded over both runs: %q, want SIGUSR2", got)
	}
	slurmtest.WantContains(t, "the job's output", out,
		"SIGUSR2: no more relaunches here",
		"requeued Slurm job "+id+" after SIGUSR2 (scontrol requeue "+id+")",
		"restarted 1 times already (slurm.max_requeues: 1): it will not be requeued again",
		"run directory .gpuguard/runs/slurm-"+id)
	if n := len(slurmtest.Events(t, runDir, "attempt_start")); n != 2 {
		t.Errorf("%d attempts over both runs, want 2", n)
	}
}

// A host OOM whose knob is at its floor: raise_slurm_mem requeues the job
// with a larger --mem (scontrol requeue, then scontrol update
// MinMemoryNode=), and the requeued run, with the memory it needs, reads the
// larger request back and completes. gpuguard is the batch shell (exec):
// Slurm's SIGTERM after the requeue would end a batch shell waiting for it,
// and slurmstepd then kills the rest of the batch step at once.
func TestHostOOMRequeuesWithMoreMemory(t *testing.T) {
	cl.Need(t)
	if !cl.Cgroup {
		t.Skip("the cluster runs without cgroups (proctrack/linuxproc): --mem is not enforced")
	}
	t.Parallel()
	dir := workDir(t)
	pol := `version: 1
knobs:
  mb: {flag: --mb}
rules:
  - name: host-oom
    when: {kind: host_oom}
    steps:
      - {halve: mb, min: 400}
      - raise_slurm_mem: {by: 2, max: 1G}
backoff: {initial: 0s, max: 0s, jitter: 0}
`
	if err := os.WriteFile(filepath.Join(dir, "more.yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH --mem=300M
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
echo "run with SLURM_MEM_PER_NODE=$SLURM_MEM_PER_NODE: $(scontrol show job $SLURM_JOB_ID | grep -o 'MinMemoryNode=[^ ]*')"
exec %s run --policy more.yaml -- srun python3 alloc.py --mb 400
`, cl.GG))
	cl.WaitJob(t, id, 2*time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info := cl.WaitEnd(t, id, 3*time.Minute)
	out := slurmtest.ReadFile(t, filepath.Join(dir, "job.out"))
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	if info["MinMemoryNode"] != "600M" {
		t.Errorf("MinMemoryNode=%s after the requeue, want 600M", info["MinMemoryNode"])
	}
	slurmtest.WantContains(t, "the job's output", out,
		"run with SLURM_MEM_PER_NODE=300: MinMemoryNode=300M",
		"rule host-oom step 2: mem 300M→600M;",
		"; requeueing the Slurm job with it",
		"requeued Slurm job "+id+" with mem 300M→600M (scontrol update JobId="+id+" MinMemoryNode=600)",
		"run with SLURM_MEM_PER_NODE=600: MinMemoryNode=600M",
		"host-oom step 2: mem 300M→600M, requeued",
		"restart 1",
		"holding 400 MiB")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	if got := strings.Join(slurmtest.Kinds(slurmtest.Verdicts(t, runDir)), ","); got != "host_oom,none" {
		t.Errorf("verdicts %s, want host_oom,none", got)
	}
	req := slurmtest.Events(t, runDir, "requeue")
	if len(req) != 1 || req[0]["result"] != "requeued with more memory" {
		t.Errorf("requeue events %v", req)
	}
	var changes []string
	for _, d := range slurmtest.Events(t, runDir, "decision") {
		cs, _ := d["changes"].([]any)
		for _, c := range cs {
			c := c.(map[string]any)
			changes = append(changes, fmt.Sprint(c["name"], " ", c["old"], "→", c["new"]))
		}
	}
	if strings.Join(changes, ",") != "mem 300M→600M" {
		t.Errorf("decisions' changes %v, want mem 300M→600M", changes)
	}
}

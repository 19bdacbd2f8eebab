package slurm_test

// BenchmarkRelaunchLatency: how long a job that ran out of GPU memory is
// down, from the out-of-memory line to the next launch.
//
//	go test -run '^$' -bench RelaunchLatency -benchtime 5x ./slurm/
//
// The local cases need no Slurm; the srun case runs when the Slurm tests
// run (as root, or with GPUGUARD_SLURM_CONF). See docs/slurm.md.

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

var benchBuild struct {
	once sync.Once
	dir  string
	gg   string
	err  error
}

// benchGpuguard returns a gpuguard binary: the tests' one, or one built for
// the benchmark when the Slurm tests skip.
func benchGpuguard(b *testing.B) string {
	b.Helper()
	if cl.GG != "" {
		return cl.GG
	}
	benchBuild.once.Do(func() {
		benchBuild.dir, benchBuild.err = os.MkdirTemp("", "gg-bench-bin-")
		if benchBuild.err != nil {
			return
		}
		benchBuild.gg = filepath.Join(benchBuild.dir, "gpuguard")
		if err := slurmtest.Build(cl.Root, benchBuild.gg); err != nil {
			benchBuild.err = fmt.Errorf("cannot build gpuguard for the benchmark: %v", err)
		}
	})
	if benchBuild.err != nil {
		b.Fatal(benchBuild.err)
	}
	return benchBuild.gg
}

// relaunchCase is one way a job runs out of memory: gpuguard's arguments
// before "--", the job, and what the waits in it add up to.
type relaunchCase struct {
	name  string
	flags []string // gpuguard run flags
	argv  string   // the job (a shell word list)
	env   []string
	waits string // the configured waits the latency includes
	slurm bool   // run as a Slurm batch job (needs the cluster)
}

func BenchmarkRelaunchLatency(b *testing.B) {
	cases := []relaunchCase{
		{
			name: "process_exits", argv: "python3 ranks.py --batch 64", env: []string{"RANK=1"},
			waits: "none: the process exits after its OOM line",
		},
		{
			name: "ranks_hang/launcher_passes_SIGTERM", argv: "python3 launch.py --forward 2 python3 ranks.py --batch 64",
			env:   []string{"RANKS_HANG_TERM=default"},
			waits: "oom_grace 1s (rank 0 hangs; the launcher, as torchrun does, passes SIGTERM to its ranks)",
		},
		{
			name: "ranks_hang/own_sessions", flags: []string{"--grace", "1s"}, argv: "python3 launch.py 2 python3 ranks.py --batch 64",
			env:   []string{"RANKS_HANG_TERM=default"},
			waits: "oom_grace 1s + --grace 1s (rank 0 hangs in a session of its own; the launcher dies of SIGTERM without passing it on; gpuguard's stop sends rank 0 SIGTERM itself)",
		},
		{
			name: "srun_ranks_hang", argv: "srun -n2 --label python3 ranks.py --batch 64", slurm: true,
			waits: "oom_grace 1s (rank 0 hangs ignoring SIGTERM; srun ends the step at gpuguard's SIGTERM)",
		},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.slurm && cl.Skip != "" {
				b.Skip(cl.Skip)
			}
			gg := benchGpuguard(b)
			var launch, up []float64
			for i := 0; i < b.N; i++ {
				l, u := relaunchOnce(b, gg, c)
				launch, up = append(launch, l), append(up, u)
			}
			b.ReportMetric(slurmtest.Median(launch), "ms-oom-to-launch")
			b.ReportMetric(slices.Max(launch), "ms-oom-to-launch-max")
			b.ReportMetric(slurmtest.Median(up), "ms-oom-to-rank-up")
			b.Logf("%s: waits %s; OOM line to gpuguard's next launch: median %.0f ms (%s); to the first rank's first line: median %.0f ms",
				c.name, c.waits, slurmtest.Median(launch), slurmtest.MsList(launch), slurmtest.Median(up))
		})
	}
}

// relaunchOnce runs the job under gpuguard once (one OOM, one relaunch that
// succeeds) and returns the milliseconds from the OOM line (rank 1 prints
// its time just before it) to gpuguard's attempt_start event of attempt 2
// (gpuguard has started the launcher), and to the first "launched at" line
// of attempt 2 (a rank's Python is up).
func relaunchOnce(b *testing.B, gg string, c relaunchCase) (launch, up float64) {
	b.Helper()
	dir := slurmtest.JobDir(b)
	for _, f := range []string{"ranks.py", "launch.py", "ranks.yaml"} {
		slurmtest.CopyFile(b, filepath.Join(cl.Root, "slurm", "testdata", f), filepath.Join(dir, f))
	}
	args := append([]string{"run", "--policy", "ranks.yaml"}, c.flags...)
	var runDir string
	if c.slurm {
		script := fmt.Sprintf("#!/bin/bash\n#SBATCH -n 2\n#SBATCH -o job.out\nexec %s %s -- %s\n", gg, strings.Join(args, " "), c.argv)
		if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o755); err != nil {
			b.Fatal(err)
		}
		out, err := cl.Command(dir, "sbatch", "--parsable", "--wait", "job.sh").CombinedOutput()
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
		if err != nil {
			b.Fatalf("sbatch --wait job.sh: %v\n%s\n%s", err, out, slurmtest.TryRead(filepath.Join(dir, "job.out")))
		}
		runDir = filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	} else {
		runDir = filepath.Join(dir, "run")
		cmd := exec.Command(gg, append(append(args, "--run-dir", runDir, "--"), strings.Fields(c.argv)...)...)
		cmd.Dir = dir
		cmd.Env = append(append([]string(nil), cl.Env...), c.env...)
		if cl.Env == nil {
			cmd.Env = append(os.Environ(), c.env...)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("gpuguard run -- %s: %v\n%s", c.argv, err, out)
		}
	}
	output := slurmtest.TryRead(filepath.Join(runDir, "output.log"))
	oom := slurmtest.Stamp(output, "rank 1 oom at ")
	i := strings.Index(output, "batch=32")
	if oom == 0 || i < 0 {
		b.Fatalf("no OOM line or no second attempt in %s:\n%s", runDir, output)
	}
	j := strings.LastIndex(output[:i], "launched at ")
	upAt := slurmtest.Stamp(output[j:], "launched at ")
	var started time.Time
	evs, err := slurmtest.ReadEvents(runDir, "attempt_start")
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range evs {
		if ev["attempt"] == float64(2) {
			started, _ = time.Parse(time.RFC3339Nano, fmt.Sprint(ev["time"]))
		}
	}
	if started.IsZero() {
		b.Fatalf("no attempt_start of attempt 2 in %s", runDir)
	}
	at := float64(started.UnixNano()) / 1e9
	return (at - oom) * 1000, (upAt - oom) * 1000
}

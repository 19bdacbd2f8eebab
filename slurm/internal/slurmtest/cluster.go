// Package slurmtest is the harness that gpuguard's tests against a real
// Slurm use (slurm/ on a one-node cluster, slurm/multinode/ on a cluster of
// several nodes): TestMain's rules (when the tests skip, starting and
// stopping the cluster, building gpuguard), submitting jobs and waiting for
// them, reading a run directory's journal, and the text checks the tests
// share. What is specific to one cluster (its start script's environment,
// the nodes of the multi-node cluster) stays in its test package.
package slurmtest

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Cluster is the Slurm cluster a test package uses.
type Cluster struct {
	Name   string   // what the tests are called in messages: "Slurm", "multi-node Slurm"
	Skip   string   // why the tests skip ("" when they run)
	Root   string   // the repository
	Conf   string   // slurm.conf
	Env    []string // environment for Slurm commands and jobs
	GG     string   // the gpuguard binary
	Cgroup bool     // proctrack/cgroup
}

// Setup is what a test package's TestMain gives Main.
type Setup struct {
	// Root is the repository, relative to the test package's directory.
	Root string
	// Short is the skip reason under -short.
	Short string
	// Start starts the cluster (or sets c.Skip when it cannot) and returns
	// what stops it; code is non-zero when the tests cannot run although
	// they should.
	Start func() (stop func() error, code int)
	// Leftovers, when set, names what the tests left on the cluster after
	// they ran ("" when nothing): anything fails the run.
	Leftovers func() string
}

// Main is TestMain for a package of Slurm tests. The tests skip under
// -short and with GPUGUARD_SLURM=off; with GPUGUARD_SLURM=require a reason
// to skip fails the run instead. Otherwise Main starts the cluster, builds
// gpuguard into c.GG, runs the tests and stops the cluster, also when the
// binary is interrupted or near its -test.timeout; a cluster that does not
// stop cleanly fails the run.
func (c *Cluster) Main(m *testing.M, s Setup) (code int) {
	flag.Parse()
	root, err := filepath.Abs(s.Root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.Root = root
	switch {
	case testing.Short():
		c.Skip = s.Short
	case os.Getenv("GPUGUARD_SLURM") == "off":
		c.Skip = "GPUGUARD_SLURM=off"
	default:
		stopCluster, startCode := s.Start()
		if stopCluster != nil {
			stop := sync.OnceValue(stopCluster)
			defer func() {
				// Daemons or processes left behind fail the run.
				if err := stop(); err != nil && code == 0 {
					code = 1
				}
			}()
			c.stopBeforeDying(stop)
		}
		if startCode != 0 {
			return startCode
		}
	}
	if c.Skip != "" && os.Getenv("GPUGUARD_SLURM") == "require" && !testing.Short() {
		fmt.Fprintf(os.Stderr, "GPUGUARD_SLURM=require, but the %s tests cannot run: %s\n", c.Name, c.Skip)
		return 1
	}
	if c.Skip == "" {
		dir, err := os.MkdirTemp("", "gg-slurm-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		c.GG = filepath.Join(dir, "gpuguard")
		if err := Build(c.Root, c.GG); err != nil {
			fmt.Fprintf(os.Stderr, "cannot build gpuguard for the %s tests: %v\n", c.Name, err)
			return 1
		}
	}
	code = m.Run()
	if c.Skip == "" && s.Leftovers != nil {
		if left := s.Leftovers(); left != "" {
			fmt.Fprintf(os.Stderr, "left on the %s cluster after the tests (the stop script ends it):\n%s", c.Name, left)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Build builds gpuguard from the repository root into the file out, whose
// directory is made readable by every user (jobs run it).
func Build(root, out string) error {
	if err := os.Chmod(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	build := exec.Command(goCmd, "build", "-o", out, ".")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if msg, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, msg)
	}
	return nil
}

// stopBeforeDying stops the cluster when the test binary is about to die
// without running TestMain's deferred calls: interrupted (SIGINT, SIGTERM:
// the cluster is stopped, then the signal ends the binary as it would have),
// or near its -test.timeout (the panic that ends a binary that ran out of
// time runs no deferred call, and the daemons would outlive it).
func (c *Cluster) stopBeforeDying(stop func() error) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "%v: stopping the tests' %s cluster first\n", sig, c.Name)
		stop()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return
	}
	// Enough for the stop scripts: cancelling the jobs waits up to
	// KillWait, then the daemons get up to 20 s each.
	const margin = 75 * time.Second
	if d, _ := g.Get().(time.Duration); d > 2*margin {
		time.AfterFunc(d-margin, func() {
			fmt.Fprintf(os.Stderr, "-test.timeout %s is %s away: stopping the tests' %s cluster now, so that it does not outlive the test binary\n", d, margin, c.Name)
			stop()
		})
	}
}

// Private is a cluster of the tests' own, in a state directory of its own,
// started and stopped by a pair of scripts in slurm/.
type Private struct {
	c           *Cluster
	start, stop string // the scripts, e.g. start-local-slurm.sh
	Dir         string // the state directory (removed, with its lock file, on Stop)
	Env         []string
}

// Private returns the cluster that the scripts start and stop (names in
// slurm/) with the state directory dir and the environment env.
func (c *Cluster) Private(start, stop, dir string, env []string) *Private {
	return &Private{c: c, start: start, stop: stop, Dir: dir, Env: env}
}

// Start runs the start script and returns its stderr (its progress).
func (p *Private) Start() (stderr string, err error) {
	cmd := exec.Command("bash", filepath.Join(p.c.Root, "slurm", p.start))
	cmd.Env = p.Env
	var buf bytes.Buffer
	cmd.Stderr = &buf
	_, err = cmd.Output()
	return buf.String(), err
}

// Failed is TestMain's code after the start script failed: 0 with the
// cluster's Skip set when Slurm is not installed and the script could not
// install it, 1 (the script's output printed) otherwise.
func (p *Private) Failed(stderr string, err error) int {
	if _, lerr := exec.LookPath("slurmctld"); lerr != nil {
		p.c.Skip = "Slurm is not installed and slurm/" + p.start + " could not install it: " + LastLines(stderr, 3)
		return 0
	}
	fmt.Fprintf(os.Stderr, "slurm/%s failed: %v\n%s", p.start, err, stderr)
	return 1
}

// Stop runs the stop script with --purge and removes the state directory;
// the error says that the script could not stop everything (its output,
// naming what it left, is printed).
func (p *Private) Stop() error {
	cmd := exec.Command("bash", filepath.Join(p.c.Root, "slurm", p.stop), "--purge")
	cmd.Env = p.Env
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm/%s could not stop the tests' cluster cleanly (%v); it names what it found:\n%s", p.stop, err, out)
	}
	os.RemoveAll(p.Dir)
	os.Remove(p.Dir + ".lock")
	return err
}

// SetConf makes conf the cluster's slurm.conf: Slurm commands and jobs get
// it as SLURM_CONF, in an environment without the caller's Slurm and
// gpuguard variables. It returns the file's text for what else the test
// package reads from it.
func (c *Cluster) SetConf(conf string) (text string, err error) {
	c.Conf = conf
	c.Env = nil
	for _, kv := range os.Environ() {
		// Slurm's input variables would change what sbatch and srun do.
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "SBATCH_") && !strings.HasPrefix(kv, "SRUN_") && !strings.HasPrefix(kv, "GPUGUARD_") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "SLURM_CONF="+conf)
	data, err := os.ReadFile(conf)
	if err != nil {
		return "", err
	}
	text = string(data)
	c.Cgroup = strings.Contains(text, "ProctrackType=proctrack/cgroup")
	return text, nil
}

// FreePorts returns n TCP ports that were free on 127.0.0.1 a moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// LastLines is the last n lines of s, joined with " | ".
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Need skips the test when the cluster's tests skip.
func (c *Cluster) Need(t testing.TB) {
	t.Helper()
	if c.Skip != "" {
		t.Skip(c.Skip)
	}
}

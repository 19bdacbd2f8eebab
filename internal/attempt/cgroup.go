package attempt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
)

// Containment: each attempt in a cgroup of its own, where gpuguard may create
// one, so that the kernel, not a walk of /proc, says which processes are the
// job's. Nothing the job does (a cleared environment, a new session, a double
// fork, a rewritten process title) takes a process out of its cgroup, and
// ending the attempt kills the whole cgroup at once.
//
//   - cgroup v2 (the unified hierarchy, alone or beside v1; gpuguard's own
//     cgroup or a subtree delegated to it, as under `systemd-run --user
//     --scope` or a Slurm step with delegation): the job is cloned straight
//     into the new cgroup (CLONE_INTO_CGROUP, so that not even its first
//     fork can be outside), and ending the attempt writes cgroup.kill.
//   - cgroup v1 with the freezer controller: the thread that forks the job
//     moves into the new cgroup for the fork and back at once (a v1 cgroup
//     holds threads, and a child starts in its parent thread's), and ending
//     the attempt freezes the cgroup, sends SIGKILL to each process in it,
//     and thaws it: a frozen process cannot fork while the list is read.
//
// Elsewhere (no cgroup file system, or one gpuguard may not write) the job's
// processes are those of its tree (proctree.go). Containment is chosen by
// Spec.Containment, else $GPUGUARD_CONTAINMENT, else the first of the above
// that works.

// Containment modes (Spec.Containment, $GPUGUARD_CONTAINMENT).
const (
	ContainAuto    = "auto"    // the first that works: cgroup2, cgroup1, tree
	ContainCgroup2 = "cgroup2" // cgroup v2 only, else the tree
	ContainCgroup1 = "cgroup1" // cgroup v1 freezer only, else the tree
	ContainTree    = "tree"    // no cgroup: the process tree and the subreaper
)

// containmentEnv chooses the containment when Spec.Containment is empty.
const containmentEnv = "GPUGUARD_CONTAINMENT"

// cgroup is one attempt's cgroup.
type cgroup struct {
	v1  bool
	dir string // the attempt's cgroup directory
	// fd is the directory opened for CLONE_INTO_CGROUP (v2); -1 otherwise.
	fd int
	// home is the tasks file of the v1 cgroup the forking thread came from,
	// to move it back to.
	home string
}

// String names the containment for status lines and logs.
func (c *cgroup) String() string {
	if c == nil {
		return "process tree"
	}
	if c.v1 {
		return "cgroup v1 freezer " + c.dir
	}
	return "cgroup v2 " + c.dir
}

// Containment names how the attempt's processes are held together: "cgroup
// v2 DIR", "cgroup v1 freezer DIR", or "process tree".
func (a *Attempt) Containment() string { return a.cg.String() }

var containment struct {
	once sync.Once
	line string
}

// ContainmentLine says, in one line for the start of a run, which
// containment the attempts of this process get (Spec.Containment empty):
// it creates a cgroup as an attempt would, and removes it. The answer is
// worked out once.
func ContainmentLine() string {
	containment.once.Do(func() {
		mode, err := containmentMode("")
		if err != nil {
			containment.line = "containment: " + err.Error()
			return
		}
		if mode == ContainTree && underSlurm() && os.Getenv(containmentEnv) == "" {
			containment.line = "containment: process tree and subreaper, inside the Slurm step's own cgroup, which Slurm ends (" + containmentEnv + "=auto makes one of gpuguard's own)"
			return
		}
		cg, why := newCgroup(mode, "gpuguard-probe-"+newToken())
		if cg == nil {
			first := why.Error()
			if i := strings.IndexByte(first, '\n'); i >= 0 {
				first = first[:i]
			}
			containment.line = "containment: process tree and subreaper (no cgroup: " + first + ")"
			return
		}
		cg.remove(0)
		kind := "cgroup v2"
		if cg.v1 {
			kind = "cgroup v1 freezer"
		}
		containment.line = "containment: " + kind + ", each attempt in a cgroup of its own under " + filepath.Dir(cg.dir)
	})
	return containment.line
}

// CheckContainment reports why containment mode (ContainCgroup2,
// ContainCgroup1) cannot be had here, nil when it can: it creates a cgroup
// as an attempt would, and removes it.
func CheckContainment(mode string) error {
	m, err := containmentMode(mode)
	if err != nil || m == ContainTree {
		return err
	}
	cg, err := newCgroup(m, "gpuguard-check-"+newToken())
	if cg == nil {
		return err
	}
	cg.remove(0)
	return nil
}

// containmentMode is the mode spec asks for, checked.
func containmentMode(spec string) (string, error) {
	m := spec
	if m == "" {
		m = os.Getenv(containmentEnv)
	}
	switch m {
	case "":
		if underSlurm() {
			return ContainTree, nil
		}
		return ContainAuto, nil
	case ContainAuto:
		return ContainAuto, nil
	case ContainCgroup2, ContainCgroup1, ContainTree:
		return m, nil
	}
	return "", fmt.Errorf("containment %q is not one of auto, cgroup2, cgroup1, tree (from %s or Spec.Containment)", m, containmentEnv)
}

// underSlurm reports whether gpuguard runs inside a Slurm job. Slurm keeps
// each step in a cgroup of its own, which holds the step's memory limit and
// which Slurm ends with the step: the attempts stay in it rather than move
// to a cgroup of gpuguard's (which would leave Slurm's accounting, and in a
// step's cgroup v2 tree would break its no-internal-process rule), unless
// $GPUGUARD_CONTAINMENT asks for one.
func underSlurm() bool { return slurmenv.FromEnv(os.Environ()).InSlurm() }

// newCgroup creates the cgroup named name for an attempt, as mode allows.
// It returns nil and why when there is none to be had: the caller then
// contains the job by its process tree.
func newCgroup(mode, name string) (*cgroup, error) {
	var errs []error
	if mode == ContainAuto || mode == ContainCgroup2 {
		c, err := newCgroup2(name)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("cgroup v2: %w", err))
	}
	if mode == ContainAuto || mode == ContainCgroup1 {
		c, err := newCgroup1(name)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("cgroup v1: %w", err))
	}
	if len(errs) == 0 {
		return nil, errors.New("containment set to " + ContainTree)
	}
	return nil, errors.Join(errs...)
}

// mount is a cgroup file system mounted on this machine.
type mount struct {
	root, point string // the hierarchy's path mounted, and where
}

// cgroupMount finds the mount of the v2 hierarchy (v1 == "") or of the v1
// hierarchy with controller v1, from /proc/self/mountinfo.
func cgroupMount(v1 string) (mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mount{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case v1 == "" && g[0] == "cgroup2":
		case v1 != "" && g[0] == "cgroup" && hasOption(g[2], v1):
		default:
			continue
		}
		return mount{root: procfs.UnescapeMountinfo(f[3]), point: procfs.UnescapeMountinfo(f[4])}, nil
	}
	if v1 == "" {
		return mount{}, errors.New("no cgroup2 file system is mounted")
	}
	return mount{}, fmt.Errorf("no cgroup v1 hierarchy with the %s controller is mounted", v1)
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// ownCgroup is the path of gpuguard's cgroup in the v2 hierarchy (v1 == "")
// or the v1 hierarchy with controller v1, from /proc/self/cgroup.
func ownCgroup(v1 string) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if v1 == "" && f[0] == "0" && f[1] == "" {
			return f[2], nil
		}
		if v1 != "" && hasOption(f[1], v1) {
			return f[2], nil
		}
	}
	return "", errors.New("gpuguard's own cgroup is not listed in /proc/self/cgroup")
}

// cgroupDir is the directory of gpuguard's cgroup under m.
func cgroupDir(m mount, own string) (string, error) {
	rel, err := filepath.Rel(m.root, own)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("gpuguard's cgroup %s is outside the hierarchy mounted at %s", own, m.point)
	}
	return filepath.Join(m.point, rel), nil
}

// mkCgroup creates the cgroup named name under gpuguard's own
// cgroup in the v2 hierarchy (v1 == "") or the v1 hierarchy with controller
// v1, and returns its parent's directory and its own.
func mkCgroup(v1, name string) (parent, dir string, err error) {
	m, err := cgroupMount(v1)
	if err != nil {
		return "", "", err
	}
	own, err := ownCgroup(v1)
	if err != nil {
		return "", "", err
	}
	parent, err = cgroupDir(m, own)
	if err != nil {
		return "", "", err
	}
	dir = filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("cannot create a cgroup in %s: %w", parent, err)
	}
	return parent, dir, nil
}

func newCgroup2(name string) (*cgroup, error) {
	_, dir, err := mkCgroup("", name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		// Before Linux 5.14: the freeze-and-kill of v1 would do, but
		// cgroup.freeze is as recent as 5.2; keep it simple.
		_ = os.Remove(dir)
		return nil, errors.New("this kernel's cgroup v2 has no cgroup.kill (Linux 5.14 or later)")
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("cannot open %s: %w", dir, err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

func newCgroup1(name string) (*cgroup, error) {
	parent, dir, err := mkCgroup("freezer", name)
	if err != nil {
		return nil, err
	}
	home := filepath.Join(parent, "tasks")
	if err := unix.Access(home, unix.W_OK); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("cannot move threads back to %s: %w", parent, err)
	}
	return &cgroup{v1: true, dir: dir, fd: -1, home: home}, nil
}

// cgroupDesc names cg for the watchdog ("" for none); openCgroup reads it.
func cgroupDesc(cg *cgroup) string {
	if cg == nil {
		return ""
	}
	return cg.String()
}

// openCgroup is the watchdog's handle on an attempt's cgroup, named by
// String's form.
func openCgroup(desc string) *cgroup {
	switch {
	case strings.HasPrefix(desc, "cgroup v2 "):
		return &cgroup{dir: strings.TrimPrefix(desc, "cgroup v2 "), fd: -1}
	case strings.HasPrefix(desc, "cgroup v1 freezer "):
		return &cgroup{v1: true, dir: strings.TrimPrefix(desc, "cgroup v1 freezer "), fd: -1}
	}
	return nil
}

// prepare readies cmd's attributes so that the child starts in c.
func (c *cgroup) prepare(attr *syscall.SysProcAttr) {
	if c == nil || c.v1 {
		return
	}
	attr.UseCgroupFD, attr.CgroupFD = true, c.fd
}

// enter moves the calling thread, which must be locked to its goroutine and
// is about to fork the job, into a v1 cgroup; leave moves it back. Both do
// nothing under v2.
func (c *cgroup) enter() error {
	if c == nil || !c.v1 {
		return nil
	}
	return writeFile(filepath.Join(c.dir, "tasks"), strconv.Itoa(unix.Gettid()))
}

func (c *cgroup) leave() error {
	if c == nil || !c.v1 {
		return nil
	}
	return writeFile(c.home, strconv.Itoa(unix.Gettid()))
}

// started closes what only the start needed.
func (c *cgroup) started() {
	if c != nil && c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// pids lists the processes in the cgroup.
func (c *cgroup) pids() []int {
	if c == nil {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if pid, err := strconv.Atoi(sc.Text()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// signal sends sig to every process in the cgroup (but gpuguard).
func (c *cgroup) signal(sig syscall.Signal) {
	self := os.Getpid()
	for _, pid := range c.pids() {
		if pid != self {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// kill ends every process in the cgroup: cgroup.kill under v2; under v1 it
// freezes the cgroup, sends SIGKILL to each process in it, and thaws it. It
// reports whether there was a process to kill.
func (c *cgroup) kill() bool {
	if c == nil {
		return false
	}
	if len(c.pids()) == 0 {
		return false
	}
	if !c.v1 {
		if err := writeFile(filepath.Join(c.dir, "cgroup.kill"), "1"); err == nil {
			return true
		}
		c.signal(syscall.SIGKILL)
		return true
	}
	// Never freeze a cgroup that holds gpuguard (a thread that could not
	// move back): kill what else is there.
	for _, pid := range c.pids() {
		if pid == os.Getpid() {
			c.signal(syscall.SIGKILL)
			return true
		}
	}
	state := filepath.Join(c.dir, "freezer.state")
	if writeFile(state, "FROZEN") == nil {
		// Freezing finishes once every task has stopped; one in an
		// uninterruptible sleep can keep it FREEZING. SIGKILL works either
		// way, and the frozen tasks cannot fork meanwhile.
		for i := 0; i < 100; i++ {
			if b, err := os.ReadFile(state); err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	c.signal(syscall.SIGKILL)
	_ = writeFile(state, "THAWED")
	return true
}

// remove deletes the cgroup once it is empty, waiting up to wait for the
// processes killed to leave it. It reports whether the cgroup is gone.
func (c *cgroup) remove(wait time.Duration) bool {
	if c == nil {
		return true
	}
	c.started()
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// forked is how the fork of the job went (Attempt.fork).
type forked struct {
	cmd *exec.Cmd
	err error
	// cgErr: the child could not be started in the cgroup, and was started
	// outside it.
	cgErr error
	// threadStuck: the forking thread could not leave the job's v1 cgroup;
	// it must end with its goroutine rather than run anything else.
	threadStuck bool
}

// fork starts cmd in the attempt's cgroup, from the calling thread, which
// must be locked to its goroutine. When the kernel refuses to start it there
// (a v2 cgroup in a state that takes no processes), it starts it outside.
func (a *Attempt) fork(cmd *exec.Cmd) forked {
	var f forked
	if err := a.cg.enter(); err != nil {
		f.cgErr = err
	}
	f.cmd, f.err = cmd, cmd.Start()
	if err := a.cg.leave(); err != nil {
		f.threadStuck = true
		a.logger.Error("a thread of gpuguard could not leave the job's cgroup; the cgroup is not frozen when the attempt ends",
			zap.String("cgroup", a.cg.dir), zap.Error(err))
	}
	if f.err == nil || a.cg == nil || a.cg.v1 {
		return f
	}
	again := &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr}
	attr := *cmd.SysProcAttr
	attr.UseCgroupFD, attr.CgroupFD = false, 0
	again.SysProcAttr = &attr
	if err := again.Start(); err != nil {
		f.err = err // the command's own failure, not the cgroup's
		return f
	}
	f.cmd, f.cgErr, f.err = again, f.err, nil
	return f
}

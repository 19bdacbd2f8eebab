package attempt

import (
	"errors"
	"fmt"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// gpuguard as PID 1 (a container's entrypoint). PID 1 has duties no other
// process has: every orphan of the PID namespace is re-parented to it and
// stays a zombie until it reaps it, the kernel gives it no default signal
// handlers (a SIGTERM it does not handle does nothing: `docker stop` then
// waits and kills), and when it exits every process left in the namespace
// is killed without a chance to clean up.
//
// So gpuguard started as PID 1 does what tini or `docker run --init` do: it
// stays a small init and runs gpuguard proper as its child, the
// re-executed binary with the same arguments. The init reaps every child
// (waitpid(-1)), whatever it is, which is safe because it starts nothing
// else whose status it needs; it passes each signal gpuguard forwards on
// to the child, which handles them as always (a SIGTERM stops the job's
// tree with --grace); and when the child has exited it asks what is left in
// the namespace to end (SIGTERM), kills it after the grace (SIGKILL), reaps
// it, and exits with the child's status. gpuguard proper, not being PID 1,
// keeps its ordinary signal handling, and stays the subreaper of the job's
// own tree.

// pid1ChildEnv marks gpuguard proper, started by the PID 1 init.
const pid1ChildEnv = "GPUGUARD_PID1_CHILD"

// RunAsInit runs the PID 1 init when gpuguard is PID 1 (and not already
// its child); ok is false otherwise.
func RunAsInit(grace time.Duration) (code int, ok bool) {
	if os.Getpid() != 1 || os.Getenv(pid1ChildEnv) != "" {
		return 0, false
	}
	if grace <= 0 {
		grace = 10 * time.Second
	}
	return initMain(grace), true
}

// initMain is the PID 1 init: gpuguard proper as its child, every zombie
// reaped, signals passed on, nothing left behind.
func initMain(grace time.Duration) int {
	sigs := make(chan os.Signal, 64)
	toForward := []os.Signal{syscall.SIGCHLD, syscall.SIGWINCH}
	for _, s := range ForwardedSignals {
		toForward = append(toForward, s)
	}
	signal.Notify(sigs, toForward...)

	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), pid1ChildEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// A process group of its own, in the terminal's foreground when there
	// is one (docker run -it): a Ctrl-C then reaches gpuguard proper once,
	// from the terminal, and not a second time forwarded by the init (a
	// second SIGINT kills the job).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	err := cmd.Start()
	if err != nil && cmd.SysProcAttr.Foreground {
		// stdin is a terminal but not this session's controlling one.
		cmd = exec.Command(cmd.Path, cmd.Args[1:]...)
		cmd.Args[0] = os.Args[0]
		cmd.Env = append(os.Environ(), pid1ChildEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuguard: as PID 1, cannot start gpuguard proper: %v\n", err)
		return exitcode.Software
	}
	child := cmd.Process.Pid // its status comes from reap, never cmd.Wait
	code := -1
	for code < 0 {
		if c, ok := reapAll(child); ok {
			code = c
			break
		}
		if sig := (<-sigs).(syscall.Signal); sig != syscall.SIGCHLD {
			syscall.Kill(child, sig)
		}
	}
	signal.Stop(sigs)
	sweepNamespace(grace)
	return code
}

// reapAll reaps every child that has ended; ok when child was among them,
// with its status as gpuguard reports a job's (128+N for signal N).
func reapAll(child int) (code int, ok bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return code, ok
		}
		if pid == child {
			code, ok = ws.ExitStatus(), true
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
	}
}

// sweepNamespace ends every other process of the PID namespace: SIGTERM,
// then SIGKILL after grace, reaping them all. From PID 1, kill(-1, sig)
// reaches every process of its namespace but itself.
func sweepNamespace(grace time.Duration) {
	if syscall.Kill(-1, syscall.SIGTERM) != nil {
		reapAll(0) // nothing left to signal (ESRCH)
		return
	}
	timer := time.AfterFunc(grace, func() { syscall.Kill(-1, syscall.SIGKILL) })
	defer timer.Stop()
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: no child left
			break
		}
	}
	// Processes that are not its children (entered with nsenter or docker
	// exec, their parent outside the namespace) are killed by the kernel
	// when PID 1 exits.
}

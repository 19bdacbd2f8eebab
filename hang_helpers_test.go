package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The hang watchdog's jobs, played by the test binary (`fake-trainer
// hang-spin` in testdata/script/hang_second_signal.txtar): ten steps 0.1 s
// apart, then a silence of one kind.
func init() {
	helpers = helpers.With(supervisortest.Helpers{
		"hang-idle": hangIdle,
		"hang-busy": hangBusy,
		"hang-spin": hangSpin,
		"hang-hold": hangHold,
	})
}

func hangSteps(from, to int) {
	for step := from; step <= to; step++ {
		fmt.Printf("step %d loss 0.5\n", step)
		time.Sleep(100 * time.Millisecond)
	}
}

// hangIdle: silent and idle: it sleeps.
func hangIdle([]string) int {
	hangSteps(1, 10)
	time.Sleep(time.Hour)
	return 0
}

// hangBusy: silent but working (CPU and writes) until gpuguard has
// journalled its "silent" note, then five more steps.
func hangBusy([]string) int {
	hangSteps(1, 10)
	events := filepath.Join(os.Getenv("GPUGUARD_RUN_DIR"), "events.jsonl")
	block := make([]byte, 256<<10)
	for sum := 0; ; {
		for i := range 1_000_000 {
			sum += i * i
		}
		if err := os.WriteFile("scratch", block, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if b, _ := os.ReadFile(events); strings.Contains(string(b), `"type":"silent"`) {
			break
		}
	}
	fmt.Println("gpuguard judged me silent but working")
	hangSteps(11, 15)
	return 0
}

// hangSpin: a collective-style spin. A child (hang-hold) takes a lock and
// blocks holding it, as a rank whose peer never comes; the main process
// spins on the lock without ever blocking, as NCCL's progress loop does.
func hangSpin([]string) int {
	hangSteps(1, 10)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	peer := exec.Command(self, "hang-hold", "lock")
	out, err := peer.StdoutPipe()
	if err == nil {
		err = peer.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the peer:", err)
		return 1
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // "held"
		fmt.Fprintln(os.Stderr, "the peer did not take the lock:", err)
		return 1
	}
	f, err := os.Open("lock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			// Got it: the peer died (gpuguard's stop reached it first), or
			// an error. A collective whose peer is gone fails.
			fmt.Fprintln(os.Stderr, "the peer is gone:", err)
			return 1
		}
	}
}

// hangHold takes the lock on args[0], says "held", and blocks holding it.
func hangHold(args []string) int {
	f, err := os.Create(args[0])
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	time.Sleep(time.Hour)
	return 0
}

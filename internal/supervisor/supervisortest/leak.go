package supervisortest

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Leak is a fake trainer whose host memory grows by epoch, under an
// RLIMIT_DATA it sets on itself, as `ulimit -d` would:
//
//	leak [-epochs N] [-steps S] [-grow MIB] [-grow-epochs K] [-headroom MIB]
//	     [-step-ms MS] [-ckpt DIR] [-resume FILE]
//
// Each epoch prints "gpuguard: phase=train epoch=E", then S lines
// "step N loss X epoch E" (N counts from 1 over the run), taking -grow MiB
// more of anonymous memory over its steps and keeping it (a leak; with
// -grow-epochs K only the first K epochs of a process grow: a cache that
// fills and then stays flat), and ends by writing DIR/step-N.ckpt (renamed
// into place) and "saved checkpoint PATH". With -headroom, RLIMIT_DATA is
// set to the data segment at the start plus that much: an allocation past
// it fails, and the trainer dies as Python does, with a MemoryError
// traceback and status 1. -resume FILE continues after the checkpoint's
// step ("resumed from FILE at step N"), in a fresh process: the leak is gone.
func Leak(args []string) int {
	fs := flag.NewFlagSet("leak", flag.ContinueOnError)
	epochs := fs.Int("epochs", 10, "epochs")
	steps := fs.Int("steps", 10, "steps per epoch")
	grow := fs.Int("grow", 32, "MiB more per epoch")
	growEpochs := fs.Int("grow-epochs", 0, "epochs that grow (0: all)")
	headroom := fs.Int("headroom", 0, "RLIMIT_DATA above the start's data segment, MiB (0: none)")
	stepMs := fs.Int("step-ms", 30, "milliseconds per step")
	dir := fs.String("ckpt", "ckpt", "checkpoint directory")
	resume := fs.String("resume", "", "checkpoint to resume from")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fmt.Println("example: gpuguard's example training job (fake-trainer leak)")
	if *headroom > 0 {
		data, err := vmData()
		if err == nil {
			lim := data + uint64(*headroom)<<20
			err = unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim})
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake-trainer leak: cannot set RLIMIT_DATA: %v\n", err)
			return 2
		}
	}
	step, epoch := 0, 1
	if *resume != "" {
		b, err := os.ReadFile(*resume)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake-trainer leak: %v\n", err)
			return 1
		}
		if _, err := fmt.Sscanf(string(b), "step %d epoch %d", &step, &epoch); err != nil {
			fmt.Fprintf(os.Stderr, "fake-trainer leak: %s: %v\n", *resume, err)
			return 1
		}
		fmt.Printf("resumed from %s at step %d\n", *resume, step)
		epoch++
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "fake-trainer leak: %v\n", err)
		return 1
	}
	var kept [][]byte // the leak: never freed
	chunk := (*grow << 20) / *steps
	for grown := 0; epoch <= *epochs; epoch, grown = epoch+1, grown+1 {
		fmt.Printf("gpuguard: phase=train epoch=%d\n", epoch)
		for range *steps {
			if *growEpochs == 0 || grown < *growEpochs {
				m, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
				if err != nil {
					fmt.Fprintf(os.Stderr, "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n    cache.append(bytearray(%d))\nMemoryError\n", chunk)
					return 1
				}
				for i := 0; i < len(m); i += 4096 {
					m[i] = 1
				}
				kept = append(kept, m)
			}
			step++
			fmt.Printf("step %d loss %.3f epoch %d\n", step, 2.0/float64(step), epoch)
			time.Sleep(time.Duration(*stepMs) * time.Millisecond)
		}
		path := filepath.Join(*dir, fmt.Sprintf("step-%06d.ckpt", step))
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, "step %d epoch %d\n", step, epoch), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "fake-trainer leak: %v\n", err)
			return 1
		}
		if err := os.Rename(tmp, path); err != nil {
			fmt.Fprintf(os.Stderr, "fake-trainer leak: %v\n", err)
			return 1
		}
		fmt.Printf("saved checkpoint %s\n", path)
	}
	fmt.Printf("training complete: %d steps\n", step)
	return 0
}

// vmData is this process's data segment (VmData), as RLIMIT_DATA counts it.
func vmData() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmData in /proc/self/status")
}

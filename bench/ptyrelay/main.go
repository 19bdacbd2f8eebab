// Command ptyrelay is the floor of the passthrough benchmark: the simplest Go
// relay of a pseudo-terminal. It starts a command under a pty (creack/pty, as
// gpuguard does) and reads it with a 64 KiB buffer until the command's side
// closes. Without -tee it only reads (a copy to io.Discard); with -tee FILE it
// writes every read to stdout and to FILE, unbuffered, as script(1) does with
// its typescript. It prints the throughput on stderr. bench/relayfloor.sh
// runs it beside script(1), the same relay in C (bench/ptyrelay/c) and
// gpuguard, to tell what the kernel's pty, Go and gpuguard each cost
// (docs/performance.md, "Passthrough"):
//
//	bench/relayfloor.sh
//	go build -o bench/out/ptyrelay ./bench/ptyrelay
//	bench/out/ptyrelay [-tee FILE] bench/out/passthrough/chatty -mb 200
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"
)

func main() { os.Exit(run()) }

// run relays the command and returns the exit status: 0, 1 when the relay or
// the command failed, 2 on bad usage.
func run() int {
	tee := flag.String("tee", "", "write the output to stdout and to this `file`, as script(1) does")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: ptyrelay [-tee FILE] COMMAND [ARGS...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		return 2
	}
	var dst io.Writer = io.Discard
	if *tee != "" {
		f, err := os.Create(*tee)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ptyrelay:", err)
			return 2
		}
		defer f.Close()
		dst = io.MultiWriter(os.Stdout, f)
	}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	f, err := pty.Start(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptyrelay:", err)
		return 1
	}
	defer f.Close()
	t0 := time.Now()
	// The read ends in EIO once the command has exited and the pty's other
	// side is closed: the end of its output.
	n, cerr := io.CopyBuffer(dst, f, make([]byte, 64<<10))
	werr := cmd.Wait()
	d := time.Since(t0)
	fmt.Fprintf(os.Stderr, "%d bytes in %.2fs: %.1f MiB/s\n", n, d.Seconds(), float64(n)/d.Seconds()/(1<<20))
	if cerr != nil && !errors.Is(cerr, syscall.EIO) {
		fmt.Fprintln(os.Stderr, "ptyrelay:", cerr)
		return 1
	}
	if werr != nil {
		fmt.Fprintln(os.Stderr, "ptyrelay:", werr)
		return 1
	}
	return 0
}

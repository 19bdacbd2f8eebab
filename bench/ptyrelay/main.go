// Command ptyrelay is the floor of the passthrough benchmark: the simplest Go
// relay of a pseudo-terminal, which starts a command under a pty (creack/pty,
// as gpuguard does) and copies its output to /dev/null with a 64 KiB buffer,
// nothing else. It prints the throughput on stderr. Compared with script(1)
// on the same job, it shows what any Go relay pays before gpuguard does any
// work of its own (docs/performance.md, "Passthrough"):
//
//	bench/passthrough.sh    # builds bench/out/passthrough/chatty
//	go build -o bench/out/ptyrelay ./bench/ptyrelay
//	bench/out/ptyrelay bench/out/passthrough/chatty -mb 200
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/creack/pty"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ptyrelay COMMAND [ARGS...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	f, err := pty.Start(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptyrelay:", err)
		os.Exit(1)
	}
	t0 := time.Now()
	// The read ends in EIO once the command has exited and the pty's other
	// side is closed: the end of its output.
	n, _ := io.CopyBuffer(io.Discard, f, make([]byte, 64<<10))
	werr := cmd.Wait()
	d := time.Since(t0)
	fmt.Fprintf(os.Stderr, "%d bytes in %.2fs: %.1f MiB/s\n", n, d.Seconds(), float64(n)/d.Seconds()/(1<<20))
	if werr != nil {
		fmt.Fprintln(os.Stderr, "ptyrelay:", werr)
		os.Exit(1)
	}
}

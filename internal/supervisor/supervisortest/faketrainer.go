// Package supervisortest owns the programs that tests of the supervisor and
// of the gpuguard command run in place of real ones: a test binary
// re-executes itself as a named helper (Main, Argv), and the fake trainer
// (Trainer) is a table of such helpers, one per scripted behaviour.
package supervisortest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Trainer is the fake trainer: a training program with scripted behaviour,
// one helper per mode. A test binary registers the modes its tests use
// (Modes); a mode that no package registers is dead and goes.
//
//	print N             N lines "line i" on stdout
//	mixed               the output of Mixed, with stdout and stderr interleaved
//	alternate N         N lines on each stream, alternating
//	bigline BYTES       BYTES of 'x' without a newline
//	notrail TEXT        TEXT without a newline
//	flood N             N numbered 100-byte lines, then "END"
//	exit N              exit with status N
//	kill SIG            die of signal SIG (a name such as TERM, or a number)
//	ignoreterm READY    ignore SIGTERM, create file READY, wait to be killed
//	record FILE [PIDS]  write "ready" to FILE, then the name of each signal
//	                    received (INT TERM HUP QUIT USR1 USR2), one a line;
//	                    exit 0 at end of stdin. With PIDS, start the
//	                    grandchildren of tree first.
//	trap FILE [PIDS]    as record, but never exit (for a job without stdin)
//	tree PIDS [exit]    start a grandchild and a grandchild in a session of
//	                    its own (both sleep), write "GC SGC" (their pids) to
//	                    file PIDS, then wait to be killed, or exit 0 at once
//	                    with "exit"
//	sleep               ignore SIGHUP, write a byte to fd 3 (when open), and
//	                    wait to be killed (the grandchildren of tree)
//	stdin               copy stdin to stdout until end of file
//	printenv NAME...    "NAME=value" or "NAME unset" for each NAME
//	istty               "stdin=B stdout=B stderr=B": which are terminals
//	winsize [wait]      "size ROWS COLS" of stdout's terminal; with wait,
//	                    again after one SIGWINCH
var Trainer = Helpers{
	"print":      printLines,
	"mixed":      mixed,
	"alternate":  alternate,
	"bigline":    bigline,
	"notrail":    notrail,
	"flood":      flood,
	"exit":       exitWith,
	"kill":       killSelf,
	"ignoreterm": ignoreTerm,
	"record":     func(args []string) int { return record(arg(args, 0), arg(args, 1), false) },
	"trap":       func(args []string) int { return record(arg(args, 0), arg(args, 1), true) },
	"tree":       tree,
	"sleep":      sleepForever,
	"stdin":      copyStdin,
	"printenv":   printenv,
	"istty":      istty,
	"winsize":    winsize,
}

// needs lists the modes that start others: registering one registers those.
var needs = map[string][]string{"record": {"sleep"}, "trap": {"sleep"}, "tree": {"sleep"}}

// Modes returns the Trainer modes named, with those they start, for a test
// binary's table. An unknown name panics.
func Modes(names ...string) Helpers {
	out := Helpers{}
	var add func(string)
	add = func(name string) {
		f, ok := Trainer[name]
		if !ok {
			panic(fmt.Sprintf("supervisortest: the fake trainer has no mode %q", name))
		}
		out[name] = f
		for _, n := range needs[name] {
			add(n)
		}
	}
	for _, n := range names {
		add(n)
	}
	return out
}

func arg(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

// num is argument i as a number; a mistyped one ends the helper.
func num(args []string, i int) int {
	n, err := strconv.Atoi(arg(args, i))
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-trainer: bad number %q in %q\n", arg(args, i), args)
		os.Exit(2)
	}
	return n
}

func printLines(args []string) int {
	var b bytes.Buffer
	for i := 1; i <= num(args, 0); i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	os.Stdout.Write(b.Bytes())
	return 0
}

func mixed([]string) int {
	for _, p := range Mixed {
		w := os.Stdout
		if p.Stream == 2 {
			w = os.Stderr
		}
		w.WriteString(p.Text)
	}
	return 0
}

// alternate writes N lines on each stream, alternating, each at once (as a
// flushed print does): run alone with `> f 2>&1` the file holds them in this
// order.
func alternate(args []string) int {
	for i := 1; i <= num(args, 0); i++ {
		fmt.Fprintf(os.Stdout, "out %d\n", i)
		fmt.Fprintf(os.Stderr, "err %d\n", i)
	}
	return 0
}

func bigline(args []string) int {
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	for left := num(args, 0); left > 0; {
		k := min(left, len(chunk))
		if _, err := os.Stdout.Write(chunk[:k]); err != nil {
			return 1
		}
		left -= k
	}
	return 0
}

func notrail(args []string) int {
	os.Stdout.WriteString(arg(args, 0))
	return 0
}

func flood(args []string) int {
	var b bytes.Buffer
	for i := 1; i <= num(args, 0); i++ {
		fmt.Fprintf(&b, "flood %08d %s\n", i, strings.Repeat("y", 84))
	}
	b.WriteString("END\n")
	os.Stdout.Write(b.Bytes())
	return 0
}

func exitWith(args []string) int { return num(args, 0) }

func killSelf(args []string) int {
	sig := parseSignal(arg(args, 0))
	defaultAction(sig)
	syscall.Kill(os.Getpid(), sig)
	time.Sleep(10 * time.Second) // the signal arrives first
	return 99
}

// defaultAction gives sig its default action, also when this process
// inherited it ignored: a test run under nohup(1) starts every fake trainer
// with SIGHUP ignored, and signal.Reset restores that inherited disposition,
// which would keep the process alive.
func defaultAction(sig syscall.Signal) {
	signal.Reset(sig)
	if !signal.Ignored(sig) {
		return
	}
	var act [4]uint64 // struct sigaction, all zero: SIG_DFL, no flags, an empty mask
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}

func ignoreTerm(args []string) int {
	signal.Ignore(syscall.SIGTERM)
	touch(arg(args, 0), "ready\n")
	waitForever()
	return 0
}

func tree(args []string) int {
	if err := spawnTree(arg(args, 0)); err != nil {
		fmt.Fprintln(os.Stderr, "fake-trainer tree:", err)
		return 2
	}
	if arg(args, 1) == "exit" {
		return 0
	}
	waitForever()
	return 0
}

func sleepForever([]string) int {
	signal.Ignore(syscall.SIGHUP)
	if ready := os.NewFile(3, "ready"); ready != nil {
		ready.Write([]byte{'.'}) // spawnTree waits for this
		ready.Close()
	}
	waitForever()
	return 0
}

func copyStdin([]string) int {
	if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "fake-trainer stdin:", err)
		return 1
	}
	return 0
}

func printenv(names []string) int {
	for _, name := range names {
		if v, ok := os.LookupEnv(name); ok {
			fmt.Printf("%s=%s\n", name, v)
		} else {
			fmt.Printf("%s unset\n", name)
		}
	}
	return 0
}

func istty([]string) int {
	isatty := func(f *os.File) bool {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		return err == nil
	}
	fmt.Printf("stdin=%v stdout=%v stderr=%v\n", isatty(os.Stdin), isatty(os.Stdout), isatty(os.Stderr))
	return 0
}

func winsize(args []string) int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	printSize := func() {
		ws, err := unix.IoctlGetWinsize(int(os.Stdout.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			fmt.Printf("size error %v\n", err)
			return
		}
		fmt.Printf("size %d %d\n", ws.Row, ws.Col)
	}
	printSize()
	if arg(args, 0) == "wait" {
		<-ch
		printSize()
	}
	return 0
}

// Piece is one write of the mixed mode.
type Piece struct {
	Stream int // 1 stdout, 2 stderr
	Text   string
}

// Mixed is what the mixed mode writes, in order: plain lines, colour codes,
// tqdm-style '\r' redraws, stderr lines, and a last line without a newline.
var Mixed = []Piece{
	{1, "Epoch 1/3\n"},
	{1, "\x1b[32mINFO\x1b[0m loading data\n"},
	{2, "warning: something on stderr\n"},
	{1, "\r  0%|          | 0/4"},
	{1, "\r 50%|#####     | 2/4"},
	{1, "\r100%|##########| 4/4\n"},
	{2, "stderr without newline, "},
	{2, "then completed\n"},
	{1, "loss=0.25 step=4\n"},
	{1, "\n"},
	{1, "last line without newline"},
}

// MixedStreams returns what Mixed writes to stdout, to stderr, and to both
// in order.
func MixedStreams() (stdout, stderr, combined string) {
	var o, e, c strings.Builder
	for _, p := range Mixed {
		if p.Stream == 1 {
			o.WriteString(p.Text)
		} else {
			e.WriteString(p.Text)
		}
		c.WriteString(p.Text)
	}
	return o.String(), e.String(), c.String()
}

var signalNames = map[os.Signal]string{
	syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP",
	syscall.SIGQUIT: "QUIT", syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2",
}

func record(file, pids string, forever bool) int {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake-trainer record:", err)
		return 2
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range ch {
			f.WriteString(signalNames[sig] + "\n")
		}
	}()
	if pids != "" {
		if err := spawnTree(pids); err != nil {
			fmt.Fprintln(os.Stderr, "fake-trainer record:", err)
			return 2
		}
	}
	f.WriteString("ready\n")
	if forever {
		waitForever()
	}
	io.Copy(io.Discard, os.Stdin)
	signal.Stop(ch)
	return 0
}

// spawnTree starts the two grandchildren and writes their pids to file
// (atomically: a reader never sees half of it).
func spawnTree(file string) error {
	start := func(setsid bool) (int, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		defer r.Close()
		argv := Argv("sleep")
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{w}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
		err = cmd.Start()
		w.Close()
		if err != nil {
			return 0, err
		}
		// Wait until it ignores SIGHUP: the pty's hangup must not be what
		// kills it.
		if _, err := r.Read(make([]byte, 1)); err != nil {
			return 0, fmt.Errorf("grandchild %d did not start: %v", cmd.Process.Pid, err)
		}
		return cmd.Process.Pid, nil
	}
	gc, err := start(false)
	if err != nil {
		return err
	}
	sgc, err := start(true)
	if err != nil {
		return err
	}
	touch(file, fmt.Sprintf("%d %d\n", gc, sgc))
	return nil
}

// touch writes content to file atomically.
func touch(file, content string) {
	tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err == nil {
		os.Rename(tmp, file)
	}
}

func waitForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func parseSignal(s string) syscall.Signal {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n)
	}
	if sig := unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(s), "SIG")); sig != 0 {
		return sig
	}
	return syscall.SIGTERM
}

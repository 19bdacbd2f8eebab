package reliability

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// The chatty job's output reaches gpuguard's stdout and stderr byte for
// byte, last partial lines included: with pipes each stream exactly; under
// --pty always both streams arrive, in order, on stdout, equal after CRLF
// normalisation (the pty turns "\n" into "\r\n").
//
// Each run calls supervisor.Run in the test process, as main.go does, with
// stdout and stderr files and stdin /dev/null, two runs at a time. That is
// about twice as fast as running gpuguard as a process of its own
// (BenchmarkGpuguardRun), and loses nothing here: the signal and fault
// tests, which need gpuguard's own process, run it as one.
func TestChattyOutputIsByteIdentical(t *testing.T) {
	modes := []struct {
		pty  string
		runs int
	}{{"never", 1000}, {"always", 200}}
	for _, m := range modes {
		t.Run("pty="+m.pty, func(t *testing.T) {
			n := reps(t, m.runs)
			dir := t.TempDir()
			var next atomic.Int64
			var failures atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < 2; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(n) || failures.Load() >= 3 {
							return
						}
						if err := chattyRun(dir, m.pty, uint64(i), true); err != nil {
							failures.Add(1)
							t.Errorf("run %d: %v", i, err)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d runs with --pty %s", n, m.pty)
		})
	}
}

// chattyRun runs gpuguard once on the chatty job with seed and compares
// what it printed with what the job wrote: as a subprocess, or, with
// inProcess, by calling supervisor.Run in the test process (about twice as
// fast: BenchmarkGpuguardRun).
func chattyRun(dir, ptyMode string, seed uint64, inProcess bool) error {
	base := filepath.Join(dir, fmt.Sprint(seed))
	if err := os.Mkdir(base, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(base)
	outF, err := os.Create(filepath.Join(base, "stdout"))
	if err != nil {
		return err
	}
	defer outF.Close()
	errF, err := os.Create(filepath.Join(base, "stderr"))
	if err != nil {
		return err
	}
	defer errF.Close()
	argv := job("chatty", fmt.Sprint(seed))
	runDir := filepath.Join(base, "run")
	if inProcess {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return err
		}
		defer devnull.Close()
		code := supervisor.Run(supervisor.Config{
			Argv: argv, PTY: ptyMode, RunDir: runDir, Stdin: devnull, Stdout: outF, Stderr: errF,
		})
		if code != 0 {
			return fmt.Errorf("gpuguard exited %d", code)
		}
	} else {
		cmd := exec.Command(self(), append([]string{"-gpuguard", "--pty", ptyMode, "--run-dir", runDir, "--"}, argv...)...)
		cmd.Dir = base
		cmd.Stdout, cmd.Stderr = outF, errF
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("gpuguard: %v", err)
		}
	}
	return compareChatty(outF.Name(), errF.Name(), ptyMode, seed)
}

// compareChatty compares gpuguard's stdout and stderr files with what the
// chatty job with seed wrote.
func compareChatty(stdout, stderr, ptyMode string, seed uint64) error {
	gotOut, err := os.ReadFile(stdout)
	if err != nil {
		return err
	}
	gotErr, err := os.ReadFile(stderr)
	if err != nil {
		return err
	}
	wantOut, wantErr, both := chattyStreams(seed)
	if ptyMode == "always" {
		norm := bytes.ReplaceAll(gotOut, []byte("\r\n"), []byte("\n"))
		if !bytes.Equal(norm, []byte(both)) {
			return fmt.Errorf("--pty always: stdout differs from the job's output after CRLF normalisation at byte %d:\n%s", firstDiff(norm, []byte(both)), diffContext(norm, []byte(both)))
		}
		return checkStatusOnly(gotErr, "")
	}
	if !bytes.Equal(gotOut, []byte(wantOut)) {
		return fmt.Errorf("stdout differs from the job's at byte %d:\n%s", firstDiff(gotOut, []byte(wantOut)), diffContext(gotOut, []byte(wantOut)))
	}
	return checkStatusOnly(gotErr, wantErr)
}

// checkStatusOnly checks that stderr is the job's stderr with only
// gpuguard's own lines ("gpuguard: ...\n") around it: before the job's
// output, and after it (each after a newline gpuguard adds when the job's
// last line was partial).
func checkStatusOnly(got []byte, jobErr string) error {
	rest := string(got)
	for strings.HasPrefix(rest, "gpuguard: ") {
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			return fmt.Errorf("stderr: gpuguard line without a newline: %q", rest)
		}
		rest = rest[i+1:]
	}
	if !strings.HasPrefix(rest, jobErr) {
		return fmt.Errorf("stderr differs from the job's at byte %d:\n%s", firstDiff([]byte(rest), []byte(jobErr)), diffContext([]byte(rest), []byte(jobErr)))
	}
	tail := rest[len(jobErr):]
	if tail == "" {
		return nil
	}
	if jobErr != "" && !strings.HasSuffix(jobErr, "\n") {
		if !strings.HasPrefix(tail, "\n") {
			return fmt.Errorf("stderr: gpuguard wrote on the job's partial last line: %q", tail)
		}
		tail = tail[1:]
	}
	for _, l := range strings.SplitAfter(tail, "\n") {
		if l != "" && (!strings.HasPrefix(l, "gpuguard: ") || !strings.HasSuffix(l, "\n")) {
			return fmt.Errorf("stderr: after the job's output, a line that is not gpuguard's: %q", l)
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func diffContext(got, want []byte) string {
	i := firstDiff(got, want)
	lo := max(0, i-40)
	return fmt.Sprintf("got  (%d bytes) …%q…\nwant (%d bytes) …%q…", len(got), got[lo:min(len(got), i+40)], len(want), want[lo:min(len(want), i+40)])
}

// TestChattyJobAlone checks the comparison itself: the chatty job run
// without gpuguard writes exactly chattyStreams, and the comparison fails
// on a one-byte change.
func TestChattyJobAlone(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		argv := job("chatty", fmt.Sprint(seed))
		cmd := exec.Command(argv[0], argv[1:]...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		wo, we, _ := chattyStreams(seed)
		if o.String() != wo || e.String() != we {
			t.Fatalf("seed %d: the job alone does not write chattyStreams", seed)
		}
		if strings.Contains(wo+we, "\r\n") {
			t.Fatalf("seed %d: the chatty output contains \\r\\n", seed)
		}
		if strings.HasSuffix(wo, "\n") || strings.HasSuffix(we, "\n") {
			t.Fatalf("seed %d: a stream ends with a newline: the partial last line is missing", seed)
		}
	}
	if err := checkStatusOnly([]byte("gpuguard: x\nabc\ngpuguard: y\n"), "abc\n"); err != nil {
		t.Errorf("good stderr refused: %v", err)
	}
	for _, bad := range []string{"gpuguard: x\nabd\n", "abcgpuguard: y\n", "gpuguard: x\nab", "abc\nextra\n"} {
		if checkStatusOnly([]byte(bad), "abc") == nil && checkStatusOnly([]byte(bad), "abc\n") == nil {
			t.Errorf("bad stderr %q accepted", bad)
		}
	}
}

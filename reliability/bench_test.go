package reliability

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuguard/gpuguard/supervisor"
)

// BenchmarkGpuguardRun compares the two ways the suite could run gpuguard
// on the chatty job: in the test process (supervisor.Run with files, as
// main.go calls it) and as a process of its own (the test binary in its
// -gpuguard role, as a built binary runs). Each iteration checks the output.
//
//	go test -run '^$' -bench GpuguardRun -benchtime 100x ./reliability
func BenchmarkGpuguardRun(b *testing.B) {
	b.Run("inprocess", func(b *testing.B) {
		dir := b.TempDir()
		for i := 0; b.Loop(); i++ {
			if err := chattyInProcess(dir, "never", uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("subprocess", func(b *testing.B) {
		dir := b.TempDir()
		for i := 0; b.Loop(); i++ {
			if err := chattyRun(dir, "never", uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// chattyInProcess is chattyRun with supervisor.Run called in the test
// process.
func chattyInProcess(dir, ptyMode string, seed uint64) error {
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
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	code := supervisor.Run(supervisor.Config{
		Argv: job("chatty", fmt.Sprint(seed)), PTY: ptyMode, RunDir: filepath.Join(base, "run"),
		Policy: "", Stdin: devnull, Stdout: outF, Stderr: errF,
	})
	if code != 0 {
		return fmt.Errorf("gpuguard exited %d", code)
	}
	return compareChatty(outF.Name(), errF.Name(), ptyMode, seed)
}

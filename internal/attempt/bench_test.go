package attempt

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// BenchmarkPassthrough measures the output path of an attempt (pty or pipe
// reads, the terminal write, output.log, the scanner queue and the line
// splitter) with bench/chatty as the job. b.SetBytes makes `go test -bench`
// report MB/s. bench/passthrough.sh compares the whole gpuguard binary with
// script(1).
//
//	go test -run '^$' -bench Passthrough -benchtime 5x ./internal/attempt/
func BenchmarkPassthrough(b *testing.B) {
	chatty := filepath.Join(b.TempDir(), "chatty")
	if out, err := exec.Command("go", "build", "-o", chatty, "../../bench/chatty").CombinedOutput(); err != nil {
		b.Fatalf("building bench/chatty: %v\n%s", err, out)
	}
	const mb = 100
	for _, l := range launchers {
		b.Run(l.name, func(b *testing.B) {
			log, err := os.Create(filepath.Join(b.TempDir(), "output.log"))
			if err != nil {
				b.Fatal(err)
			}
			defer log.Close()
			var lineCount int
			b.SetBytes(mb << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, err := Start(Spec{
					Argv:   []string{chatty, "-mb", strconv.Itoa(mb)},
					PTY:    l.pty,
					Stdout: io.Discard,
					Stderr: io.Discard,
					Log:    log,
					Scan:   func(int, lines.Line) { lineCount++ },
				})
				if err != nil {
					b.Fatal(err)
				}
				<-a.Done()
				if res := a.Result(); res.Code != 0 {
					b.Fatalf("chatty exited %d", res.Code)
				}
			}
			b.StopTimer()
			if lineCount == 0 {
				b.Fatal("nothing scanned")
			}
		})
	}
	_ = os.Remove(chatty)
}

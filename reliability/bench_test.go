package reliability

import "testing"

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
			if err := chattyRun(dir, "never", uint64(i+1), true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("subprocess", func(b *testing.B) {
		dir := b.TempDir()
		for i := 0; b.Loop(); i++ {
			if err := chattyRun(dir, "never", uint64(i+1), false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package supervisor

import (
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
)

// BenchmarkLineChecks is what the two per-line checks added to the scanner
// (a rejected argument, a saved checkpoint) cost on an ordinary line.
func BenchmarkLineChecks(b *testing.B) {
	line := []byte("Epoch 3:  45%|████▌     | 450/1000 [01:23<01:41,  5.42it/s, loss=0.412, v_num=3]")
	for b.Loop() {
		policy.RejectionLine(line)
		checkpoint.SavedPath(line)
	}
}

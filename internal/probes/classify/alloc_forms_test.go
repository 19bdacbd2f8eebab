package classify

import (
	"strings"
	"testing"
)

func TestAllocForms(t *testing.T) {
	for _, tc := range []struct {
		log, format string
		requested   int64
		device      string
	}{
		{"jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 1073741824 bytes for new constant\n", "xla_failed_to_allocate", 1 << 30, ""},
		{"cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 15,032,385,536 bytes).\n", "cupy", 1 << 30, ""},
		{"RuntimeError: Caught OutOfMemoryError in replica 0 on device 0.\n", "caught_in_replica", -1, "device 0"},
		// The replica's own message, when it follows, gives the figures.
		{"RuntimeError: Caught OutOfMemoryError in replica 1 on device 1.\nOriginal Traceback (most recent call last):\n" +
			"  File \"/venv/lib/python3.10/site-packages/torch/nn/parallel/parallel_apply.py\", line 64, in _worker\n    output = module(*input, **kwargs)\n" +
			"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 15.77 GiB of which 1.50 GiB is free.\n",
			"modern", 2 << 30, "GPU 1"},
	} {
		v := classifyString(t, tc.log, ClassifierOptions{})
		if v.Kind != KindGPUOOM || v.OOM == nil || v.OOM.Format != tc.format {
			t.Errorf("%q: %s %+v, want gpu_oom of format %s", strings.TrimSpace(tc.log), v.Kind, v.OOM, tc.format)
			continue
		}
		if tc.requested >= 0 && (v.OOM.RequestedBytes == nil || *v.OOM.RequestedBytes != tc.requested) {
			t.Errorf("%q: requested %s, want %d", strings.TrimSpace(tc.log), fmtPtr(v.OOM.RequestedBytes), tc.requested)
		}
		if tc.device != "" && (v.OOM.Device == nil || *v.OOM.Device != tc.device) {
			t.Errorf("%q: device %s, want %s", strings.TrimSpace(tc.log), fmtPtr(v.OOM.Device), tc.device)
		}
	}
	// Not memory: a replica's other errors; a count that is no byte count.
	for _, log := range []string{
		"RuntimeError: Caught ValueError in replica 0 on device 0.\n",
		"INFO: allocated so far: 3 shards\n",
	} {
		if v := classifyString(t, log, ClassifierOptions{}); isOOMKind(v.Kind) {
			t.Errorf("%q: %s, not a memory failure", strings.TrimSpace(log), v.Kind)
		}
	}
}

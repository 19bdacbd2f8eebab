package classify

import (
	"strings"
	"testing"
)

// The message reader reads through what loggers, terminals and pastes do to
// a message's lines. Each case is one message in one shape; the figures
// must come out whole.
func TestMessageReader(t *testing.T) {
	const gib = int64(1) << 30
	const mib = int64(1) << 20
	for _, tc := range []struct {
		name      string
		log       string
		kind      Kind
		exception string
		requested int64
		free      int64
		rank      int
	}{
		{"hard wrap mid-word at 60 columns",
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocat\n" +
				"e 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of whic\n" +
				"h 1.50 GiB is free. Of the allocated memory 13.10 GiB is all\n" +
				"ocated by PyTorch, and 40.00 MiB is reserved by PyTorch but unallocated.\n",
			KindGPUOOM, "torch.OutOfMemoryError", 2 * gib, 3 * gib / 2, -1},
		{"a logger's prefix repeated, the sentence's period lost",
			"2026-01-20 14:02:23,015 - ERROR - trainer - torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB\n" +
				"2026-01-20 14:02:23,016 - ERROR - trainer - GPU 1 has a total capacity of 23.55 GiB of which 604.31 MiB is fr\n" +
				"2026-01-20 14:02:23,016 - ERROR - trainer - ee. Of the allocated memory 21.87 GiB is allocated by PyTorch.\n",
			KindGPUOOM, "torch.OutOfMemoryError", 5 * gib / 4, 60431 * mib / 100, -1},
		{"glog's prefix repeated",
			"E0212 03:12:01.551240  9914 train.cc:88] RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 15.78 GiB total\n" +
				"E0212 03:12:01.551311  9914 train.cc:88] capacity; 14.01 GiB already allocated; 301.19 MiB free; 14.62 GiB reserved in total by PyTorch)\n",
			KindGPUOOM, "RuntimeError", 512 * mib, 30119 * mib / 100, -1},
		{"ranks interleaved",
			"[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity of 79.10 GiB of wh\n" +
				"[rank0]: step 120 loss 2.1\n" +
				"[rank1]: ich 3.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch.\n",
			KindGPUOOM, "torch.OutOfMemoryError", 4 * gib, 3 * gib, 1},
		{"newlines escaped in a JSON record",
			`{"level":"error","msg":"Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n    x = f()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 39.39 GiB of which 1.00 GiB is free.\n"}` + "\n",
			KindGPUOOM, "torch.OutOfMemoryError", 8 * gib, gib, -1},
		{"newlines escaped in a Python repr",
			`WARNING:root:worker said: 'Traceback (most recent call last):\n  File "w.py", line 9, in run\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 6.90 GiB already allocated; 10.00 MiB free; 7.00 GiB reserved in total by PyTorch)\n'` + "\n",
			KindGPUOOM, "RuntimeError", 20 * mib, 10 * mib, -1},
		{"glued to the text before it",
			"ERROR: batch 131 raised an exception, aborting runtorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 10.75 GiB of which 1.00 GiB is free.\n",
			KindGPUOOM, "torch.cuda.OutOfMemoryError", 2 * gib, gib, -1},
		{"glued after a sentence",
			"saving checkpoint... done.RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 10.75 GiB total capacity; 7.91 GiB already allocated; 1.00 GiB free; 8.03 GiB reserved in total by PyTorch)\n",
			KindGPUOOM, "RuntimeError", 2 * gib, gib, -1},
		{"no-break spaces from a web page's copy",
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00\u00a0GiB. GPU 0 has a total capacity of 15.77\u00a0GiB of which 1.50\u00a0GiB is free.\n",
			KindGPUOOM, "torch.OutOfMemoryError", 2 * gib, 3 * gib / 2, -1},
		{"the message itself glued to the text before it",
			"[E] run failed at step 11.CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1.50 GiB is free.\n",
			KindGPUOOM, "", 2 * gib, 3 * gib / 2, -1},
		{"posix_memalign's errno 12",
			"RuntimeError: [enforce fail at CPUAllocator.cpp:65] . posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0\n",
			KindCPUAllocOOM, "RuntimeError", -1, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind != tc.kind {
				t.Fatalf("kind %s (%s), want %s", v.Kind, v.Reason, tc.kind)
			}
			o := v.OOM
			if o == nil {
				t.Fatal("no figures")
			}
			if o.Exception != tc.exception {
				t.Errorf("exception %q, want %q", o.Exception, tc.exception)
			}
			near := func(name string, got *int64, want int64) {
				t.Helper()
				switch {
				case want < 0 && got != nil:
					t.Errorf("%s = %d, the message shows none", name, *got)
				case want >= 0 && (got == nil || *got-want > 1<<12 || want-*got > 1<<12):
					t.Errorf("%s = %s, want %d", name, fmtPtr(got), want)
				}
			}
			near("requested", o.RequestedBytes, tc.requested)
			near("free", o.FreeBytes, tc.free)
			if tc.rank >= 0 && (v.Rank == nil || *v.Rank != tc.rank) {
				t.Errorf("rank %s, want %d", fmtPtr(v.Rank), tc.rank)
			}
		})
	}
}

// What the reader must not do: errno 22 of posix_memalign is a bad
// alignment, not memory; a Windows path's "\n" outside quotes is no
// newline; a JSON record without a message field is read as it is.
func TestMessageReaderLookalikes(t *testing.T) {
	for _, log := range []string{
		"RuntimeError: [enforce fail at CPUAllocator.cpp:65] . posix_memalign(&data, gAlignment, nbytes) == 0. 22 vs 0\n",
		`loading C:\new\out of memory checks disabled` + "\n",
		`{"event":"config","max_split_size_mb":128,"note":"out of memory handling: on"}` + "\n",
	} {
		v := classifyString(t, log, ClassifierOptions{})
		if isOOMKind(v.Kind) {
			t.Errorf("%q: %s (%s), not a memory failure", strings.TrimSpace(log), v.Kind, v.Reason)
		}
	}
}

func TestExceptionName(t *testing.T) {
	for in, want := range map[string]string{
		"torch.cuda.OutOfMemoryError":              "torch.cuda.OutOfMemoryError",
		"runRuntimeError":                          "RuntimeError",
		"runtorch.OutOfMemoryError":                "torch.OutOfMemoryError", // the package's name says where the glue ends
		"numpy.core._exceptions.MemoryError":       "numpy.core._exceptions.MemoryError",
		"done.RuntimeError":                        "RuntimeError",
		"numpy.core._exceptions._ArrayMemoryError": "numpy.core._exceptions._ArrayMemoryError",
		"jaxlib.xla_extension.XlaRuntimeError":     "jaxlib.xla_extension.XlaRuntimeError",
		"RuntimeError":                             "RuntimeError",
	} {
		if got := exceptionName(in); got != want {
			t.Errorf("exceptionName(%q) = %q, want %q", in, got, want)
		}
	}
}

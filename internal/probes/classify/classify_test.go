package classify

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// classifyString runs the classifier over log, written to the splitter in
// one piece.
func classifyString(t testing.TB, log string, o ClassifierOptions) Verdict {
	t.Helper()
	c, err := NewClassifier(o)
	if err != nil {
		t.Fatal(err)
	}
	s := lines.New(lines.DefaultMax, c.Line)
	s.Write([]byte(log))
	s.Flush()
	return c.Verdict()
}

const gib = 1 << 30
const mib = 1 << 20

// rnd rounds a size computed from a printed value to whole bytes.
func rnd(f float64) int64 { return int64(math.Round(f)) }

// A modern PyTorch CUDA OOM line, used in several cases.
const modernOOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 15.82 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory in use. Of the allocated memory 72.10 GiB is allocated by PyTorch, and 3.95 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"

type classifyCase struct {
	name   string
	log    string
	kind   Kind
	phase  Phase
	rank   int    // -1: none
	reason string // a substring of Verdict.Reason
	check  func(t *testing.T, v Verdict)
}

func wantBytes(t *testing.T, what string, got *int64, want int64) {
	t.Helper()
	if got == nil || *got != want {
		t.Errorf("%s = %s, want %d", what, fmtPtr(got), want)
	}
}

func runCases(t *testing.T, cases []classifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind != tc.kind {
				t.Fatalf("kind = %s (%q at line %d: %q), want %s", v.Kind, v.Reason, v.Line, v.Text, tc.kind)
			}
			if v.Phase != tc.phase {
				t.Errorf("phase = %q, want %q (marks %v)", v.Phase, tc.phase, v.Phases)
			}
			switch {
			case tc.rank < 0 && v.Rank != nil:
				t.Errorf("rank = %d, want none", *v.Rank)
			case tc.rank >= 0 && (v.Rank == nil || *v.Rank != tc.rank):
				t.Errorf("rank = %s, want %d", fmtPtr(v.Rank), tc.rank)
			}
			if !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("reason = %q, want it to contain %q", v.Reason, tc.reason)
			}
			if v.Kind != KindNone && v.Diagnosis == "" {
				t.Error("no diagnosis")
			}
			if tc.check != nil {
				tc.check(t, v)
			}
		})
	}
}

func TestGPUOOMForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "modern with every clause", log: "Traceback (most recent call last):\n" + modernOOM + "\n",
			kind: KindGPUOOM, rank: -1, reason: "CUDA out of memory",
			check: func(t *testing.T, v Verdict) {
				o := v.OOM
				wantBytes(t, "requested", o.RequestedBytes, rnd(15.82*gib))
				wantBytes(t, "total", o.TotalBytes, rnd(79.15*gib))
				wantBytes(t, "free", o.FreeBytes, rnd(1.20*gib))
				wantBytes(t, "in use", o.InUseBytes, rnd(77.93*gib))
				wantBytes(t, "allocated", o.AllocatedBytes, rnd(72.10*gib))
				wantBytes(t, "reserved unallocated", o.ReservedUnallocatedBytes, rnd(3.95*gib))
				wantBytes(t, "reserved total (derived)", o.ReservedTotalBytes, rnd(72.10*gib)+rnd(3.95*gib))
				if o.Device == nil || *o.Device != "GPU 0" || o.Exception != "torch.OutOfMemoryError" || o.Format != "modern" {
					t.Errorf("device %s, exception %q, format %q", fmtPtr(o.Device), o.Exception, o.Format)
				}
				if v.Line != 2 {
					t.Errorf("line = %d, want 2", v.Line)
				}
				// 3.95 GiB stranded against 15.82 GiB asked: a quarter, fragmentation.
				if !v.Fragmentation || !strings.Contains(strings.Join(v.Suggestions, " "), "expandable_segments:True") {
					t.Errorf("fragmentation %v, suggestions %q", v.Fragmentation, v.Suggestions)
				}
			}},
		{name: "other processes and clauses in another order",
			log:  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 23.65 GiB of which 1.06 GiB is free. Process 1234 has 12.00 GiB memory in use. Including non-PyTorch memory, this process has 10.51 GiB memory in use. Process 5678 has 80.00 MiB memory in use. Of the allocated memory 9.81 GiB is allocated by PyTorch, with 256.00 MiB allocated in private pools (e.g., CUDA Graphs), and 212.33 MiB is reserved by PyTorch but unallocated.\n",
			kind: KindGPUOOM, rank: -1, reason: "CUDA out of memory",
			check: func(t *testing.T, v Verdict) {
				o := v.OOM
				if len(o.OtherProcesses) != 2 || o.OtherProcesses[0] != (ProcUse{1234, 12 * gib}) || o.OtherProcesses[1] != (ProcUse{5678, 80 * mib}) {
					t.Errorf("other processes %+v", o.OtherProcesses)
				}
				wantBytes(t, "private pools", o.PrivatePoolsBytes, 256*mib)
				wantBytes(t, "in use", o.InUseBytes, rnd(10.51*gib))
				if !v.OtherProcesses || !strings.Contains(v.Diagnosis, "process 1234 holds 12.00 GiB") || !strings.Contains(v.Diagnosis, "Inside a container") {
					t.Errorf("diagnosis %q", v.Diagnosis)
				}
				if !strings.Contains(strings.Join(v.Suggestions, " "), "Free the GPU") {
					t.Errorf("suggestions %q", v.Suggestions)
				}
				if v.Fragmentation {
					t.Error("212 MiB stranded is below the 256 MiB floor: not fragmentation")
				}
			}},
		{name: "old form reserved in total", log: "RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 10.76 GiB total capacity; 9.61 GiB already allocated; 27.19 MiB free; 9.83 GiB reserved in total by PyTorch)\n",
			kind: KindGPUOOM, rank: -1, reason: "CUDA out of memory",
			check: func(t *testing.T, v Verdict) {
				o := v.OOM
				wantBytes(t, "reserved total", o.ReservedTotalBytes, rnd(9.83*gib))
				wantBytes(t, "reserved unallocated (derived)", o.ReservedUnallocatedBytes, rnd(9.83*gib)-rnd(9.61*gib))
				if o.Format != "old" || o.Exception != "RuntimeError" {
					t.Errorf("format %q exception %q", o.Format, o.Exception)
				}
			}},
		{name: "oldest form with cached", log: "RuntimeError: CUDA out of memory. Tried to allocate 1.96 GiB (GPU 0; 11.91 GiB total capacity; 7.22 GiB already allocated; 1.41 GiB free; 2.05 GiB cached)\n",
			kind: KindGPUOOM, rank: -1, reason: "CUDA out of memory",
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "reserved unallocated", v.OOM.ReservedUnallocatedBytes, rnd(2.05*gib))
				if !v.Fragmentation || !strings.Contains(v.Diagnosis, "enough to hold the whole request") {
					t.Errorf("fragmentation %v: %q", v.Fragmentation, v.Diagnosis)
				}
			}},
		{name: "old HIP form", log: "RuntimeError: HIP out of memory. Tried to allocate 2.00 MiB (GPU 0; 15.98 GiB total capacity; 15.20 GiB already allocated; 0 bytes free; 15.50 GiB reserved in total by PyTorch)\n",
			kind: KindGPUOOM, rank: -1, reason: "HIP out of memory",
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "free", v.OOM.FreeBytes, 0)
				if v.OOM.Format != "old_hip" {
					t.Errorf("format %q", v.OOM.Format)
				}
			}},
		{name: "old XPU form without free", log: "RuntimeError: XPU out of memory. Tried to allocate 1024.00 MiB (GPU 0; 15.56 GiB total capacity; 14.18 GiB already allocated; 14.30 GiB reserved in total by PyTorch)\n",
			kind: KindGPUOOM, rank: -1, reason: "XPU out of memory",
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Format != "old_xpu" || v.OOM.FreeBytes != nil {
					t.Errorf("format %q free %s", v.OOM.Format, fmtPtr(v.OOM.FreeBytes))
				}
				wantBytes(t, "requested", v.OOM.RequestedBytes, gib)
			}},
		{name: "IPEX larger than 4GB", log: "RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! Tried to allocate 5.00 GiB (GPU  0; 15.56 GiB total capacity; 1.02 GiB already allocated; 1.05 GiB reserved in total by PyTorch)\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Device == nil || *v.OOM.Device != "GPU  0" || v.OOM.Format != "old_xpu" {
					t.Errorf("device %s format %q", fmtPtr(v.OOM.Device), v.OOM.Format)
				}
				wantBytes(t, "requested", v.OOM.RequestedBytes, 5*gib)
			}},
		{name: "hard-wrapped mid-word", log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 Mi\nB. GPU 0 has a total capacity of 7.79 GiB of which 3.25 MiB is fr\nee. Of the allocated memory 6.90 GiB is allocated by PyTorch, and 101.35 MiB is reserved by PyTorch but unallocated.\nTraceback (most recent call last):\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				o := v.OOM
				wantBytes(t, "requested", o.RequestedBytes, 20*mib)
				wantBytes(t, "free", o.FreeBytes, rnd(3.25*mib))
				wantBytes(t, "total", o.TotalBytes, rnd(7.79*gib))
				wantBytes(t, "reserved unallocated", o.ReservedUnallocatedBytes, rnd(101.35*mib))
				if v.Line != 1 {
					t.Errorf("line %d, want the first line of the message", v.Line)
				}
			}},
		{name: "wrapped at a space with indented continuation", log: "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 7.80 GiB total capacity;\n    6.61 GiB already allocated; 196.56 MiB free; 6.95 GiB reserved in total by PyTorch)\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "allocated", v.OOM.AllocatedBytes, rnd(6.61*gib))
				wantBytes(t, "reserved total", v.OOM.ReservedTotalBytes, rnd(6.95*gib))
			}},
		{name: "CUDA error out of memory", log: "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call\n",
			kind: KindGPUOOM, rank: -1, reason: "CUDA error: out of memory",
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Format != "cuda_error" || v.OOM.RequestedBytes != nil {
					t.Errorf("%+v", v.OOM)
				}
			}},
		{name: "THC runtime error 2", log: "THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory\nRuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Format != "thc_runtime_error_2" || v.Line != 1 {
					t.Errorf("format %q line %d", v.OOM.Format, v.Line)
				}
			}},
		{name: "cuDNN alloc failed", log: "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Format != "cudnn_alloc_failed" {
					t.Errorf("format %q", v.OOM.Format)
				}
			}},
		{name: "NCCL cuda failure then calloc size", log: "node1:4021:4102 [3] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\nnode1:4021:4102 [3] NCCL INFO include/alloc.h:49 -> 1\nnode1:4021:4102 [3] include/alloc.h:103 NCCL WARN Failed to CUDA calloc 4194304 bytes\n",
			kind: KindGPUOOM, rank: -1, reason: "NCCL",
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Format != "nccl_cuda_oom" || v.Line != 1 {
					t.Errorf("format %q line %d", v.OOM.Format, v.Line)
				}
				wantBytes(t, "requested (from the later line)", v.OOM.RequestedBytes, 4194304)
			}},
		{name: "HIP modern with HIP graphs", log: "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB of which 1.12 GiB is free. Of the allocated memory 60.01 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., HIP Graphs), and 2.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n",
			kind: KindGPUOOM, rank: -1, reason: "HIP out of memory",
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Format != "modern_hip" || !v.Fragmentation || !strings.Contains(strings.Join(v.Suggestions, " "), "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True") {
					t.Errorf("format %q fragmentation %v suggestions %q", v.OOM.Format, v.Fragmentation, v.Suggestions)
				}
			}},
		{name: "allowed memory with native allocator table", log: "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 4.68 GiB\nRequested               : 1.14 GiB\nDevice limit            : 23.68 GiB\nFree (according to CUDA): 16.56 MiB\nPyTorch limit (set by user-supplied memory fraction)\n                        : 23.68 GiB\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				o := v.OOM
				wantBytes(t, "requested", o.RequestedBytes, rnd(1.14*gib))
				wantBytes(t, "allocated", o.AllocatedBytes, rnd(4.68*gib))
				wantBytes(t, "total", o.TotalBytes, rnd(23.68*gib))
				wantBytes(t, "free", o.FreeBytes, rnd(16.56*mib))
				if o.Device == nil || *o.Device != "device 0" {
					t.Errorf("device %s", fmtPtr(o.Device))
				}
			}},
		{name: "JAX attempting to reserve", log: "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Attempting to reserve 9.64G at the bottom of memory. That was not possible. There are 5.12G free, 0B reserved, and 5.12G reservable.\n",
			kind: KindGPUOOM, rank: -1, reason: "XLA",
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "requested", v.OOM.RequestedBytes, rnd(9.64*gib))
				wantBytes(t, "free", v.OOM.FreeBytes, rnd(5.12*gib))
				if v.OOM.Exception != "jaxlib.xla_extension.XlaRuntimeError" {
					t.Errorf("exception %q", v.OOM.Exception)
				}
			}},
		{name: "older jaxlib RuntimeError", log: "RuntimeError: Resource exhausted: Out of memory while trying to allocate 17179869184 bytes.\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "requested", v.OOM.RequestedBytes, 17179869184)
				if v.OOM.Format != "xla_resource_exhausted" || v.OOM.Exception != "RuntimeError" {
					t.Errorf("format %q exception %q", v.OOM.Format, v.OOM.Exception)
				}
			}},
		{name: "TF root errors entry", log: "tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found.\n  (0) Resource exhausted: OOM when allocating tensor with shape[64,256,56,56] and type half on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\t [[{{node conv2/Conv2D}}]]\nHint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "requested", v.OOM.RequestedBytes, 64*256*56*56*2)
				if v.OOM.Exception != "tensorflow.python.framework.errors_impl.ResourceExhaustedError" {
					t.Errorf("exception %q, want the one printed on the line before", v.OOM.Exception)
				}
				if v.Line != 2 {
					t.Errorf("line %d", v.Line)
				}
			}},
		{name: "TF warning that is not a failure", log: "2021-03-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:246] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.18GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be performance gains if more memory were available.\n",
			kind: KindNone, rank: -1},
		{name: "TF EigenAllocator fatal", log: "F tensorflow/core/common_runtime/gpu/gpu_device.cc:103] EigenAllocator for GPU ran out of memory when allocating 0. See error logs for more detailed info.\nAborted (core dumped)\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "requested", v.OOM.RequestedBytes, 0)
				if v.OOM.Format != "tf_eigen_allocator_fatal" {
					t.Errorf("format %q", v.OOM.Format)
				}
			}},
		{name: "MPS without prefix", log: "MPS backend out of memory (MPS allocated: 12.43 GiB, other allocations: 5.12 GiB, max allowed: 18.13 GiB). Tried to allocate 704.00 MiB on private pool.\n",
			kind: KindGPUOOM, rank: -1, reason: "MPS",
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "requested", v.OOM.RequestedBytes, 704*mib)
				if v.OOM.Exception != "" || *v.OOM.Device != "MPS" || !strings.Contains(v.Diagnosis, "18.13 GiB") {
					t.Errorf("exception %q device %s diagnosis %q", v.OOM.Exception, fmtPtr(v.OOM.Device), v.Diagnosis)
				}
			}},
		{name: "request larger than the device", log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 41.63 GiB. GPU 0 has a total capacity of 15.99 GiB of which 13.71 GiB is free. Of the allocated memory 1.27 GiB is allocated by PyTorch, and 612.40 MiB is reserved by PyTorch but unallocated.\n",
			kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if !strings.Contains(v.Diagnosis, "larger than the whole device") || !strings.HasPrefix(v.Suggestions[0], "Do not retry") {
					t.Errorf("%q / %q", v.Diagnosis, v.Suggestions)
				}
				if v.Fragmentation {
					t.Error("612 MiB stranded against a 41 GiB request is not fragmentation")
				}
			}},
	})
}

func TestHostAndCPUForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "CPU allocator", log: "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)\n",
			kind: KindCPUAllocOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				wantBytes(t, "requested", v.OOM.RequestedBytes, gib)
				if v.OOM.Exception != "RuntimeError" {
					t.Errorf("exception %q", v.OOM.Exception)
				}
			}},
		{name: "TH not enough memory wrapped", log: "$ Torch: not enough memory: you tried to allocate 3GB. Buy new RAM\n!\n",
			kind: KindCPUAllocOOM, rank: -1,
			check: func(t *testing.T, v Verdict) { wantBytes(t, "requested", v.OOM.RequestedBytes, 3*gib) }},
		{name: "numpy unable to allocate", log: "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.00 GiB for an array with shape (20000, 20000) and data type float64\n",
			kind: KindCPUAllocOOM, rank: -1,
			check: func(t *testing.T, v Verdict) { wantBytes(t, "requested", v.OOM.RequestedBytes, 3*gib) }},
		{name: "unable to allocate at the end of a line", log: "RuntimeError: unable to allocate\n", kind: KindCrash, rank: -1},
		{name: "Python MemoryError", log: "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nMemoryError\n",
			kind: KindCPUAllocOOM, rank: -1},
		{name: "fork ENOMEM", log: "OSError: [Errno 12] Cannot allocate memory\n", kind: KindCPUAllocOOM, rank: -1},
		{name: "DataLoader exited unexpectedly", log: "RuntimeError: DataLoader worker (pid(s) 41210, 41211) exited unexpectedly\n",
			kind: KindHostOOM, rank: -1, reason: "exited unexpectedly",
			check: func(t *testing.T, v Verdict) {
				if !strings.Contains(v.Diagnosis, "does not prove") {
					t.Errorf("a worker that exited unexpectedly is low-confidence evidence: %q", v.Diagnosis)
				}
			}},
		{name: "DataLoader exited with code 1 is not memory", log: "RuntimeError: DataLoader worker (pid 4312) exited unexpectedly with exit code 1. Details are lost due to multiprocessing.\n",
			kind: KindCrash, rank: -1, reason: "exited with code 1"},
		{name: "DataLoader bus error", log: "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n",
			kind: KindHostOOM, rank: -1, reason: "bus error"}, // shared memory: see TestSharedMemoryForms
		{name: "zsh killed", log: "epoch 1\nzsh: killed     python train.py --bs 64\n", kind: KindHostOOM, rank: -1},
		{name: "bash job killed", log: "./run.sh: line 12: 48213 Killed                  python train.py\n", kind: KindHostOOM, rank: -1},
		{name: "a sentence with killed is not a kill", log: "INFO: the old worker was killed and restarted\nprocess 12 killed the lock holder\n", kind: KindNone, rank: -1},
		{name: "localized German", log: "loading\nGetötet\n", kind: KindHostOOM, rank: -1},
		{name: "IDE exit code 137", log: "Process finished with exit code 137 (interrupted by signal 9: SIGKILL)\n", kind: KindHostOOM, rank: -1, reason: "137"},
		{name: "mp spawn SIGKILL", log: "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL\n", kind: KindHostOOM, rank: -1},
		{name: "kernel cgroup", log: "[12345.678901] Memory cgroup out of memory: Killed process 4242 (python3) total-vm:10485760kB, anon-rss:8388608kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0\n",
			kind: KindHostOOM, rank: -1, reason: "cgroup",
			check: func(t *testing.T, v Verdict) {
				if !strings.Contains(v.Diagnosis, "python3 (pid 4242), which held 8.00 GiB") {
					t.Errorf("diagnosis %q", v.Diagnosis)
				}
			}},
		{name: "Slurm old wording with srun task", log: "slurmstepd: error: Detected 2 oom-kill event(s) in step 4242.0 cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.\nsrun: error: gpu-07: task 3: Out Of Memory\n",
			kind: KindHostOOM, rank: 3, reason: "Slurm",
			check: func(t *testing.T, v Verdict) {
				if v.Host != "gpu-07" || !strings.Contains(v.Diagnosis, "2 oom-kill event(s) in step 4242.0") || !strings.HasPrefix(v.Suggestions[0], "Ask Slurm") {
					t.Errorf("host %q diagnosis %q suggestions %q", v.Host, v.Diagnosis, v.Suggestions)
				}
			}},
		{name: "torchrun glog prefix exitcode -9", log: "E0516 14:02:11.123000 140213 torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) local_rank: 0 (pid: 9912) of binary: /usr/bin/python\n",
			kind: KindHostOOM, rank: -1},
		{name: "torchrun root cause exitcode 1 is not memory", log: "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n============================================================\ntrain.py FAILED\n------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n  time      : 2024-01-01_00:00:00\n  host      : n1\n  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 77)\n  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n============================================================\n",
			kind: KindCrash, rank: 3, reason: "exited with code 1"},
		{name: "torchrun root cause alone", log: "Root Cause (first observed failure):\n[0]:\n  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 77)\n============================================================\n",
			kind: KindCrash, rank: 3, reason: "exited with code 1"},
	})
}

func TestCrashForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "module not found", log: "ModuleNotFoundError: No module named 'apex'\n", kind: KindCrash, rank: -1, reason: "module not found: No module named 'apex'"},
		{name: "generic exception", log: "  File \"train.py\", line 9, in <module>\n    raise ValueError(\"bad config\")\nValueError: bad config\n", kind: KindCrash, rank: -1, reason: "ValueError: bad config"},
		{name: "first exception wins over the chained one", log: "KeyError: 'label'\n\nDuring handling of the above exception, another exception occurred:\n\nRuntimeError: wrapped\n", kind: KindCrash, rank: -1, reason: "KeyError"},
		{name: "specific crash beats an earlier generic one", log: "UserWarning: x\nAssertionError: shapes\n[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n",
			kind: KindCrash, rank: 2, reason: "illegal memory access"},
		{name: "memory beats an earlier crash", log: "ValueError: x\nRuntimeError: DataLoader worker (pid 12) is killed by signal: Killed.\n", kind: KindHostOOM, rank: -1},
		{name: "NaN in HF dict", log: "{'loss': 2.1, 'learning_rate': 1e-05, 'epoch': 0.1}\n{'loss': nan, 'learning_rate': 1e-05, 'epoch': 0.2}\n", kind: KindCrash, phase: PhaseTrain, rank: -1, reason: "NaN"},
		{name: "loss is nan message", log: "Loss is nan, stopping training\n", kind: KindCrash, rank: -1, reason: "NaN"},
		{name: "detectron2 FloatingPointError", log: "FloatingPointError: Loss became infinite or NaN at iteration=1021!\n", kind: KindCrash, rank: -1, reason: "NaN"},
		{name: "words with nan are not NaN", log: "Epoch 1/3\nloading nanodet weights; finance=3 nano=2\n", kind: KindNone, phase: PhaseTrain, rank: -1},
		{name: "Slurm time limit", log: "slurmstepd: error: *** JOB 4242 ON gpu-01 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n", kind: KindCrash, rank: -1, reason: "time limit"},
		{name: "other CUDA error", log: "RuntimeError: CUDA error: unspecified launch failure\n", kind: KindCrash, rank: -1, reason: "CUDA error: unspecified launch failure"},
		{name: "illegal instruction core dumped", log: "Illegal instruction (core dumped)\n", kind: KindCrash, rank: -1, reason: "crashed"},
		{name: "except line in a traceback is not an exception", log: "  File \"a.py\", line 3\n    except RuntimeError:\n", kind: KindNone, rank: -1},
	})
}

func TestLookAlikes(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "memory summary", log: "|            CUDA OOMs: 1            |        cudaMalloc retries: 3         |\n| Allocated memory      |    2311 MB |    7054 MB |  153210 MB |  150899 MB |\n", kind: KindNone, rank: -1},
		{name: "fairseq oom counter", log: "| epoch 001:    850 / 4120 loss=10.812, num_updates=847, oom=0, wall=1712\n", kind: KindNone, phase: PhaseTrain, rank: -1},
		{name: "allocator warning", log: "[W CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported on this platform (function operator())\n", kind: KindNone, rank: -1},
		{name: "AutoBatch probe OOM", log: "AutoBatch: Computing optimal batch size for --imgsz 640\nAutoBatch: CUDA:0 (Tesla T4) 14.75G total, 0.11G reserved, 0.05G allocated, 14.59G free\n      Params      GFLOPs  GPU_mem (GB)  forward (ms) backward (ms)                   input                  output\nCUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 14.75 GiB total capacity; 11.2 GiB already allocated; 1.5 GiB free; 12.0 GiB reserved in total by PyTorch)\nAutoBatch: Using batch-size 24 for CUDA:0 8.85G/14.75G (60%) ✅\n", kind: KindNone, rank: -1},
		{name: "DeepSpeed allocator cache flush warning", log: "[2023-05-01 10:00:00,000] [WARNING] [stage3.py:1850:step] 4 pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is detrimental to performance.\n", kind: KindNone, rank: -1},
		{name: "config dump", log: "num_workers: 8\nbatch_size: 64\npin_memory: true\nmax_mem: 2911M\n", kind: KindNone, rank: -1},
		{name: "caught OOM that training survived", log: "Epoch 0:  10%|#  | 100/1000 [00:10<01:30, loss=1.2]\nCUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.75 GiB total capacity; 13.0 GiB already allocated; 1.0 GiB free; 14.0 GiB reserved in total by PyTorch)\n| WARNING: attempting to recover from OOM in forward/backward pass\nEpoch 0:  10%|#  | 101/1000 [00:10<01:30, loss=1.2]\nEpoch 0:  10%|#  | 102/1000 [00:11<01:30, loss=1.2]\n",
			kind: KindNone, phase: PhaseTrain, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if !strings.Contains(v.Diagnosis, "line 2") || !strings.Contains(v.Diagnosis, "did not stop the job") {
					t.Errorf("the handled OOM should be mentioned: %q", v.Diagnosis)
				}
			}},
		{name: "a bar redrawn once after the OOM is not survival", log: "Epoch 0:  10%|#  | 100/1000 [00:10<01:30, loss=1.2]\nRuntimeError: CUDA error: out of memory\nEpoch 0:  10%|#  | 100/1000 [00:10<01:30, loss=1.2]\nEpoch 0:  10%|#  | 101/1000 [00:10<01:30, loss=1.2]\n",
			kind: KindGPUOOM, phase: PhaseTrain, rank: -1},
	})
}

func TestLineForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "rank prefix and another rank's traceback after", log: "[rank3]: Traceback (most recent call last):\n[rank3]: " + modernOOM + "\n[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: NCCL communicator was aborted\n",
			kind: KindGPUOOM, rank: 3},
		{name: "interleaved ranks, the first to fail wins", log: "[rank0]: Epoch 1: 50%|##| 5/10\n[rank2]: RuntimeError: CUDA error: out of memory\n[rank0]: RuntimeError: CUDA error: out of memory\n",
			kind: KindGPUOOM, phase: PhaseTrain, rank: 2},
		{name: "torchrun default prefix", log: "[default2]:Traceback (most recent call last):\n[default2]:" + modernOOM + "\n", kind: KindGPUOOM, rank: 2},
		{name: "srun label", log: " 0: step 10\n12: " + modernOOM + "\n", kind: KindGPUOOM, rank: 12},
		{name: "MPI tag", log: "[1,7]<stderr>:" + modernOOM + "\n", kind: KindGPUOOM, rank: 7},
		{name: "rank and glog prefix on NCCL watchdog", log: "[rank1]:[E1210 11:02:03.445000 123 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST) ran for 1800041 milliseconds before timing out.\n",
			kind: KindCrash, rank: 1, reason: "NCCL timeout"},
		{name: "glued to a tqdm frame", log: "100%|##########| 5/5 [00:01<00:00,  4.1it/s]RuntimeError: CUDA error: out of memory\n", kind: KindGPUOOM, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if v.OOM.Exception != "RuntimeError" {
					t.Errorf("exception %q", v.OOM.Exception)
				}
			}},
		{name: "carriage-return frames", log: "Validation DataLoader 0:  10%|#  | 1/10\rValidation DataLoader 0:  20%|## | 2/10\r" + modernOOM + "\n", kind: KindGPUOOM, phase: PhaseVal, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if v.Line != 1 {
					t.Errorf("line %d: frames of one line share its number", v.Line)
				}
			}},
		{name: "ANSI colours", log: "\x1b[1;31m" + modernOOM + "\x1b[0m\n", kind: KindGPUOOM, rank: -1},
		{name: "CRLF", log: "Epoch 2:  5%|5/100\r\n" + modernOOM + "\r\n", kind: KindGPUOOM, phase: PhaseTrain, rank: -1,
			check: func(t *testing.T, v Verdict) {
				if v.Line != 2 {
					t.Errorf("line %d", v.Line)
				}
			}},
		{name: "literal #015 and #033", log: "[1,mpirank:0,algo-1]<stdout>:#015Validation DataLoader 0:   0% 0/2 [00:00<?, ?it/s]#033[A\n[1,mpirank:0,algo-1]<stderr>:RuntimeError: CUDA error: out of memory\n",
			kind: KindGPUOOM, phase: PhaseVal, rank: 0},
		{name: "markdown quote and backticks", log: "```\n> RuntimeError: CUDA error: out of memory\n```\n", kind: KindGPUOOM, rank: -1},
		{name: "GitHub Actions timestamp", log: "2025-10-03T17:21:09.8812345Z RuntimeError: CUDA error: out of memory\n", kind: KindGPUOOM, rank: -1},
	})
}

func TestPhases(t *testing.T) {
	type mark struct {
		line  int
		phase Phase
	}
	cases := []struct {
		name  string
		log   string
		opts  ClassifierOptions
		marks []mark
		step  int64 // -1: none
		epoch int64 // -1: none
	}{
		{name: "Lightning 2 validation mid-epoch", log: "Epoch 3:  50%|#####     | 500/1000 [01:00<01:00]\nValidation DataLoader 0:  50%|#| 10/20\nValidation DataLoader 0: 100%|#| 20/20\nEpoch 3:  51%|#####     | 510/1000 [01:02<01:00]\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}, {4, PhaseTrain}}, step: 510, epoch: 3},
		{name: "Lightning 1.x combined bar stays in validation", log: "Epoch 0:  67%|######6   | 4/6\nValidation: 0it [00:00, ?it/s]\nEpoch 0:  83%|########3 | 5/6\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}}, step: 4, epoch: 0},
		{name: "Lightning sanity check", log: "Sanity Checking DataLoader 0:  50%|#| 1/2\n", marks: []mark{{1, PhaseVal}}, step: -1, epoch: -1},
		{name: "HF banners", log: "***** Running training *****\n  Num examples = 10\n{'loss': 1.2, 'learning_rate': 5e-05, 'epoch': 0.5}\n***** Running Evaluation *****\n{'eval_loss': 1.1, 'eval_runtime': 3.2, 'epoch': 1.0}\n{'loss': 1.0, 'learning_rate': 4e-05, 'epoch': 1.5}\n",
			marks: []mark{{1, PhaseTrain}, {4, PhaseVal}, {6, PhaseTrain}}, step: -1, epoch: -1},
		{name: "Keras", log: "Epoch 1/10\n 32/100 [========>.....................] - ETA: 3s - loss: 0.52\n100/100 [==============================] - 5s 50ms/step - loss: 0.4 - val_loss: 0.3\nEpoch 2/10\n",
			marks: []mark{{1, PhaseTrain}}, step: 100, epoch: 2},
		{name: "timm", log: "Train: 3 [ 100/1251 (  8%)]  Loss: 4.1 (4.2)  Time: 0.3s\nTest: [   0/48]  Time: 1.2 (1.2)  Loss:  0.9 (0.9)\nTrain: 4 [   0/1251 (  0%)]  Loss: 4.0 (4.0)\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}, {3, PhaseTrain}}, step: 0, epoch: 4},
		{name: "fairseq hydra", log: "2021-01-01 10:00:00 | INFO | fairseq_cli.train | begin training epoch 3\nepoch 003:  13%|#3   | 130/1000 [00:30<03:00, loss=4.2, num_updates=2130]\n2021-01-01 10:10:00 | INFO | fairseq_cli.train | begin validation on \"valid\" subset\n",
			marks: []mark{{1, PhaseTrain}, {3, PhaseVal}}, step: 2130, epoch: 3},
		{name: "fairseq legacy without colon", log: "| epoch 002    120 / 4120 loss=9.1, num_updates=4240\n| epoch 002 | valid on 'valid' subset | valid_loss 8.9\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}}, step: 4240, epoch: 2},
		{name: "catalyst", log: "1/10 * Epoch (train): 100% 50/50 [00:10<00:00]\n1/10 * Epoch (valid):  10% 1/10 [00:01<00:09]\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}}, step: 50, epoch: 1},
		{name: "mmcv 1.x val", log: "2022-01-01 00:00:00,000 - mmdet - INFO - Epoch [1][50/100]\tlr: 1e-2, loss: 0.5\n2022-01-01 00:01:00,000 - mmdet - INFO - Epoch(val) [1][100]\tbbox_mAP: 0.3\n2022-01-01 00:02:00,000 - mmdet - INFO - Epoch [2][50/100]\tlr: 1e-2, loss: 0.4\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}, {3, PhaseTrain}}, step: 50, epoch: 2},
		{name: "MMEngine val and iteration-based", log: "01/01 00:00:00 - mmengine - INFO - Iter(train) [  50/1000]  lr: 1e-2\n01/01 00:01:00 - mmengine - INFO - Iter(val) [ 10/100]    eta: 0:00:10\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}}, step: 50, epoch: -1},
		{name: "detectron2 file format", log: "[01/01 00:00:00] d2.engine.train_loop INFO: Starting training from iteration 0\n[01/01 00:10:00] d2.evaluation.evaluator INFO: Start inference on 500 batches\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}}, step: 0, epoch: -1},
		{name: "plain prints", log: "[train] step 10 loss 1.0\n[val] step 10 acc 0.5\nValidating...\nEvaluating on dev set\nTraining: 0it\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}, {5, PhaseTrain}}, step: 10, epoch: -1},
		{name: "ImageNet example", log: "Epoch: [0][  10/5005]\tTime  0.5\nTest: [ 10/196]\tTime  0.1\n",
			marks: []mark{{1, PhaseTrain}, {2, PhaseVal}}, step: 10, epoch: 0},
		{name: "plain step prints with explicit markers", log: "gpuguard: phase=train\nstep 10/100 loss=2.31 crop=224\ngpuguard: phase=val\nValidating at step 10: 500 images\nval step=10 loss=2.2 acc=0.41\ngpuguard: phase=train\nstep 11/100 loss=2.29 crop=224\n",
			marks: []mark{{1, PhaseTrain}, {3, PhaseVal}, {6, PhaseTrain}}, step: 11, epoch: -1},
		{name: "iteration prints", log: "Iteration 300: loss 1.93, lr 3e-4\nstep: download data\n", marks: []mark{{1, PhaseTrain}}, step: 300, epoch: -1},
		{name: "tutorial epoch and step", log: "Epoch [1/10], Step [100/600], Loss: 0.2\n", marks: []mark{{1, PhaseTrain}}, step: 100, epoch: 1},
		{name: "policy pattern", log: "== eval pass 3 ==\nstep 10\n== train pass 4 ==\n",
			opts:  ClassifierOptions{PhasePatterns: []PhasePattern{{PhaseVal, `^== eval pass \d+`}, {PhaseTrain, `(?i)== TRAIN pass`}}},
			marks: []mark{{1, PhaseVal}, {3, PhaseTrain}}, step: -1, epoch: -1},
		{name: "explicit markers rule over heuristics", log: "gpuguard: phase=train step=999 epoch=2\nValidation DataLoader 0: 10%|#| 1/10\ngpuguard: phase=val\n",
			marks: []mark{{1, PhaseTrain}, {3, PhaseVal}}, step: 999, epoch: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, tc.opts)
			var got []mark
			for _, m := range v.Phases {
				got = append(got, mark{m.Line, m.Phase})
			}
			if len(got) != len(tc.marks) {
				t.Fatalf("marks %v, want %v", got, tc.marks)
			}
			for i := range got {
				if got[i] != tc.marks[i] {
					t.Fatalf("marks %v, want %v", got, tc.marks)
				}
			}
			if tc.step < 0 && v.Step != nil || tc.step >= 0 && (v.Step == nil || *v.Step != tc.step) {
				t.Errorf("step %s, want %d", fmtPtr(v.Step), tc.step)
			}
			if tc.epoch < 0 && v.Epoch != nil || tc.epoch >= 0 && (v.Epoch == nil || *v.Epoch != tc.epoch) {
				t.Errorf("epoch %s, want %d", fmtPtr(v.Epoch), tc.epoch)
			}
		})
	}
}

// The seed post-mortem: an OOM at step 1000 during validation, 15.82 GiB
// requested, 3.95 GiB reserved but unallocated.
func TestSeedPostMortem(t *testing.T) {
	log := "| epoch 003:    990 / 1200 loss=2.1, num_updates=999\n" +
		"| epoch 003:   1000 / 1200 loss=2.0, num_updates=1000\n" +
		"| epoch 003 | begin validation on 'valid' subset\n" +
		"Traceback (most recent call last):\n" + modernOOM + "\n"
	v := classifyString(t, log, ClassifierOptions{})
	if v.Kind != KindGPUOOM || v.Phase != PhaseVal || v.Step == nil || *v.Step != 1000 || !v.Fragmentation {
		t.Fatalf("verdict %s phase %q step %s fragmentation %v", v.Kind, v.Phase, fmtPtr(v.Step), v.Fragmentation)
	}
	for _, want := range []string{"during validation", "step 1000", "15.82 GiB", "3.95 GiB", "Fragmentation"} {
		if !strings.Contains(v.Diagnosis, want) {
			t.Errorf("diagnosis lacks %q: %s", want, v.Diagnosis)
		}
	}
	s := strings.Join(v.Suggestions, "\n")
	for _, want := range []string{"expandable_segments:True", "smaller validation crop"} {
		if !strings.Contains(s, want) {
			t.Errorf("suggestions lack %q: %s", want, s)
		}
	}
	// When expandable_segments was already on, the advice says so.
	v = classifyString(t, log, ClassifierOptions{AllocConf: "expandable_segments:True,max_split_size_mb:128"})
	if s := strings.Join(v.Suggestions, "\n"); !strings.Contains(s, "already on") {
		t.Errorf("suggestions should note expandable_segments was on: %s", s)
	}
	// The same from the log itself (an env dump).
	v = classifyString(t, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"+log, ClassifierOptions{})
	if s := strings.Join(v.Suggestions, "\n"); !strings.Contains(s, "already on") {
		t.Errorf("suggestions should note expandable_segments was on: %s", s)
	}
}

func TestFragmentedRule(t *testing.T) {
	cases := []struct {
		req, ru int64
		want    bool
	}{
		{rnd(15.82 * gib), rnd(3.95 * gib), true}, // a quarter of the request
		{40 * mib, 306 * mib, true},               // enough for the whole request
		{2 * gib, 300 * mib, false},               // under a fifth
		{40 * mib, 200 * mib, false},              // under the 256 MiB floor
		{10 * gib, 2 * gib, true},                 // exactly a fifth
	}
	for _, c := range cases {
		o := &OOM{RequestedBytes: &c.req, ReservedUnallocatedBytes: &c.ru}
		if got := Fragmented(o); got != c.want {
			t.Errorf("Fragmented(req %d, ru %d) = %v, want %v", c.req, c.ru, got, c.want)
		}
	}
	if Fragmented(&OOM{}) || Fragmented(nil) {
		t.Error("fragmentation without figures")
	}
}

func TestExit(t *testing.T) {
	run := func(log string, e Exit) Verdict {
		c, err := NewClassifier(ClassifierOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := lines.New(0, c.Line)
		s.Write([]byte(log))
		s.Flush()
		c.Exit(e)
		return c.Verdict()
	}
	progress := "Epoch 1:  10%|#| 10/100\n"
	t.Run("SIGKILL with no message", func(t *testing.T) {
		v := run(progress, Exit{Code: 137, Signal: syscall.SIGKILL})
		if v.Kind != KindHostOOM || v.Phase != PhaseTrain || !strings.Contains(v.Diagnosis, "does not prove") {
			t.Errorf("%s %q %q", v.Kind, v.Phase, v.Diagnosis)
		}
	})
	t.Run("cgroup OOM kills", func(t *testing.T) {
		v := run(progress, Exit{Code: 137, Signal: syscall.SIGKILL, CgroupOOMKills: 2})
		if v.Kind != KindHostOOM || strings.Contains(v.Diagnosis, "does not prove") || !strings.Contains(v.Diagnosis, "killed 2 process") {
			t.Errorf("%s %q", v.Kind, v.Diagnosis)
		}
	})
	t.Run("cgroup kill behind a generic error", func(t *testing.T) {
		v := run(progress+"RuntimeError: DataLoader worker (pid 3) is killed by signal: Aborted.\n", Exit{Code: 1, CgroupOOMKills: 1})
		if v.Kind != KindHostOOM {
			t.Errorf("%s", v.Kind)
		}
	})
	t.Run("cgroup kill does not hide a GPU OOM", func(t *testing.T) {
		v := run(modernOOM+"\n", Exit{Code: 1, CgroupOOMKills: 1})
		if v.Kind != KindGPUOOM {
			t.Errorf("%s", v.Kind)
		}
	})
	t.Run("stopped by gpuguard is not a host OOM", func(t *testing.T) {
		v := run(progress, Exit{Code: 137, Signal: syscall.SIGKILL, StoppedByUs: true})
		if v.Kind != KindNone || !strings.Contains(v.Diagnosis, "gpuguard stopped") {
			t.Errorf("%s %q", v.Kind, v.Diagnosis)
		}
	})
	t.Run("exit 0 after a printed OOM", func(t *testing.T) {
		v := run(modernOOM+"\n", Exit{Code: 0})
		if v.Kind != KindNone || !strings.Contains(v.Diagnosis, "did not stop the job") {
			t.Errorf("%s %q", v.Kind, v.Diagnosis)
		}
	})
	t.Run("non-zero exit with nothing recognised", func(t *testing.T) {
		v := run(progress, Exit{Code: 3})
		if v.Kind != KindCrash || !strings.Contains(v.Reason, "status 3") {
			t.Errorf("%s %q", v.Kind, v.Reason)
		}
	})
	t.Run("printed OOM and a non-zero exit", func(t *testing.T) {
		v := run(modernOOM+"\n", Exit{Code: 1})
		if v.Kind != KindGPUOOM || v.Line != 1 {
			t.Errorf("%s line %d", v.Kind, v.Line)
		}
	})
}

// srun --label: a rank's GPU OOM, then srun's report of that task's end,
// which names its host; a report for another task does not.
func TestSrunTaskHost(t *testing.T) {
	for _, tc := range []struct{ tail, host string }{
		{"srun: error: gpu-07: task 1: Exited with exit code 1\n", "gpu-07"},
		{"srun: error: gpu-03: task 0: Exited with exit code 1\n", ""},
		{"srun: error: gpu 07: task 1: Exited with exit code 1\n", ""},
	} {
		log := "0: Epoch 0:  10%|#| 10/100\n1: " + modernOOM + "\n" + tc.tail
		v := classifyString(t, log, ClassifierOptions{})
		if v.Kind != KindGPUOOM || v.Rank == nil || *v.Rank != 1 || v.Host != tc.host {
			t.Errorf("%q: %s rank %v host %q, want gpu_oom on rank 1, host %q", tc.tail, v.Kind, v.Rank, v.Host, tc.host)
		}
	}
}

// Events name the rank of their line: the supervisor's OOM grace counts
// only the failing rank's steps.
func TestEventRanks(t *testing.T) {
	log := "[rank1]: Epoch 0:  10%|#| 10/100\n[rank0]: Epoch 0:  20%|#| 20/100\n[rank1]: " + modernOOM + "\n[rank0]: Epoch 0:  30%|#| 30/100\n"
	c, evs := classifyEvents(t, log)
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d:%d", e.Type, e.Rank))
	}
	want := "[1:1 2:1 2:0 3:1 2:0]" // phase, steps 10 (rank 1), 20 (rank 0), the OOM (rank 1), step 30 (rank 0)
	if fmt.Sprint(got) != want {
		t.Errorf("events (type:rank) %v, want %s", got, want)
	}
	// Rank 0's steps after rank 1's OOM are not rank 1 training on.
	if v := c.Verdict(); v.Kind != KindGPUOOM || v.Rank == nil || *v.Rank != 1 {
		t.Errorf("verdict %s rank %v, want gpu_oom on rank 1", v.Kind, v.Rank)
	}
}

// classifyEvents runs the classifier over log and returns it with the
// events it emitted.
func classifyEvents(t *testing.T, log string) (*Classifier, []Event) {
	t.Helper()
	var evs []Event
	c, err := NewClassifier(ClassifierOptions{OnEvent: func(e Event) { evs = append(evs, e) }})
	if err != nil {
		t.Fatal(err)
	}
	s := lines.New(0, c.Line)
	s.Write([]byte(log))
	s.Flush()
	return c, evs
}

func TestEvents(t *testing.T) {
	log := "Epoch 0:  10%|#| 10/100\nEpoch 0:  10%|#| 10/100\nValidation DataLoader 0: 5%|#| 1/20\n" + modernOOM + "\n"
	_, evs := classifyEvents(t, log)
	want := []Event{
		{Type: EventPhase, Line: 1, Rank: -1, Phase: PhaseTrain},
		{Type: EventStep, Line: 1, Rank: -1, Step: 10, Epoch: 0, StepKind: StepInEpoch},
		{Type: EventPhase, Line: 3, Rank: -1, Phase: PhaseVal},
		{Type: EventFailure, Line: 4, Rank: -1, Kind: KindGPUOOM},
	}
	if len(evs) != len(want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	for i := range want {
		g := evs[i]
		g.Text = ""
		if g != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, g, want[i])
		}
	}
	if !strings.HasPrefix(evs[3].Text, "torch.OutOfMemoryError") {
		t.Errorf("failure event text %q", evs[3].Text)
	}
}

// fairseq says it caught the OOM: no live failure event (the job goes on),
// and the verdict drops it once training has advanced.
func TestCaughtOOMNoEvent(t *testing.T) {
	var failures int
	c, _ := NewClassifier(ClassifierOptions{OnEvent: func(e Event) {
		if e.Type == EventFailure {
			failures++
		}
	}})
	s := lines.New(0, c.Line)
	s.Write([]byte("| epoch 001:    850 / 4120 loss=10.812, num_updates=847\n| WARNING: ran out of memory, skipping batch\n"))
	if v := c.Verdict(); v.Kind != KindGPUOOM || v.OOM.Format != "caught" || failures != 0 {
		t.Fatalf("after the warning: %s %+v, %d failure events", v.Kind, v.OOM, failures)
	}
	s.Write([]byte("| epoch 001:    900 / 4120 loss=10.694, num_updates=897\n| epoch 001:    950 / 4120 loss=10.583, num_updates=947\n"))
	if v := c.Verdict(); v.Kind != KindNone {
		t.Errorf("training went on: %s", v.Kind)
	}
}

func TestNewClassifierErrors(t *testing.T) {
	if _, err := NewClassifier(ClassifierOptions{PhasePatterns: []PhasePattern{{PhaseVal, "eval("}}}); err == nil || !strings.Contains(err.Error(), "phase pattern 1") {
		t.Errorf("bad regexp: %v", err)
	}
	if _, err := NewClassifier(ClassifierOptions{PhasePatterns: []PhasePattern{{"test", "x"}}}); err == nil || !strings.Contains(err.Error(), `"test"`) {
		t.Errorf("bad phase: %v", err)
	}
}

// Endless alternation of phases keeps a bounded number of marks, the first
// ones and the most recent ones.
func TestPhaseMarksBounded(t *testing.T) {
	c, _ := NewClassifier(ClassifierOptions{})
	s := lines.New(0, c.Line)
	n := 0
	for i := 0; i < 3*maxPhaseMarks; i++ {
		s.Write([]byte("[train] x\n[val] y\n"))
		n += 2
	}
	v := c.Verdict()
	if len(v.Phases) != maxPhaseMarks {
		t.Fatalf("%d marks, want %d", len(v.Phases), maxPhaseMarks)
	}
	if v.Phases[0].Line != 1 || v.Phases[len(v.Phases)-1].Line != n {
		t.Errorf("first mark %+v, last %+v (want line 1 and line %d)", v.Phases[0], v.Phases[len(v.Phases)-1], n)
	}
}

// sharedMemory checks a verdict about an exhausted /dev/shm: the flag, and
// advice that names workers and the shm size, never the batch.
func sharedMemory(t *testing.T, v Verdict) {
	t.Helper()
	sug := strings.Join(v.Suggestions, " ")
	if !v.SharedMemory || !strings.Contains(v.Reason, "shared memory (/dev/shm)") {
		t.Errorf("shared memory %v, reason %q", v.SharedMemory, v.Reason)
	}
	for _, want := range []string{"fewer DataLoader workers", "--shm-size", "medium: Memory"} {
		if !strings.Contains(sug, want) {
			t.Errorf("suggestions %q lack %q", sug, want)
		}
	}
	if strings.Contains(sug, "Lower the") || strings.Contains(sug, "smaller batch (") || strings.Contains(sug, "pin_memory") {
		t.Errorf("suggestions %q advise a smaller batch or host-memory settings", sug)
	}
}

func notSharedMemory(t *testing.T, v Verdict) {
	t.Helper()
	if v.SharedMemory {
		t.Errorf("shared memory set: %q", v.Reason)
	}
}

func TestSharedMemoryForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "bus error handler", log: "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n",
			kind: KindHostOOM, rank: -1, reason: "bus error", check: sharedMemory},
		{name: "PaddlePaddle's bus error handler", log: "ERROR: Unexpected BUS error encountered in DataLoader worker. This might be caused by insufficient shared memory (shm), please check whether use_shared_memory is set and storage space in /dev/shm is enough\n",
			kind: KindHostOOM, rank: -1, check: sharedMemory},
		{name: "torch shm file no space", log: "RuntimeError: unable to write to file </torch_18_1962312145_0>: No space left on device (28)\n",
			kind: KindHostOOM, rank: -1, reason: "shared memory", check: func(t *testing.T, v Verdict) {
				sharedMemory(t, v)
				if !strings.Contains(v.Diagnosis, "/torch_18_1962312145_0") || !strings.Contains(v.Diagnosis, "no space left on device") {
					t.Errorf("diagnosis %q", v.Diagnosis)
				}
			}},
		{name: "older torch without errno", log: "RuntimeError: unable to write to file </torch_31_1030151126>\n",
			kind: KindHostOOM, rank: -1, check: sharedMemory},
		{name: "fallocate of the shm file", log: "[rank0]: RuntimeError: unable to allocate shared memory(shm) for file </torch_4304_2962414746_0>: No space left on device (28)\n",
			kind: KindHostOOM, rank: 0, check: sharedMemory},
		{name: "mmap of the shm file", log: "RuntimeError: unable to mmap 67108864 bytes from file </torch_77_1203_0>: Cannot allocate memory (12)\n",
			kind: KindHostOOM, rank: -1, check: sharedMemory},
		{name: "NCCL cannot extend its shm segment", log: "node1:812:812 [0] NCCL WARN Error: failed to extend /dev/shm/nccl-Hn9qJ2 to 9637892 bytes\n",
			kind: KindHostOOM, rank: -1, check: sharedMemory},
		{name: "OSError writing under /dev/shm", log: "OSError: [Errno 28] No space left on device: '/dev/shm/cache/shard_0007.npy'\n",
			kind: KindHostOOM, rank: -1, check: sharedMemory},
		{name: "worker killed by a bus error alone", log: "RuntimeError: DataLoader worker (pid 9943) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n",
			kind: KindHostOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				sharedMemory(t, v)
				if !strings.Contains(v.Diagnosis, "only the bus error") || !strings.Contains(v.Diagnosis, "pid 9943") {
					t.Errorf("diagnosis %q", v.Diagnosis)
				}
			}},
		{name: "exited unexpectedly, then the worker's shm message", log: "RuntimeError: DataLoader worker (pid(s) 41210) exited unexpectedly\nERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n",
			kind: KindHostOOM, rank: -1, check: sharedMemory},

		// Look-alikes.
		{name: "disk full on a checkpoint path", log: "OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_2000.pt'\n",
			kind: KindCrash, rank: -1, reason: "No space left on device", check: notSharedMemory},
		{name: "torch shm file and too many open files", log: "RuntimeError: unable to open shared memory object </torch_3184_1474410342_70> in read-write mode: Too many open files (24)\n",
			kind: KindCrash, rank: -1, reason: "unable to open shared memory object", check: notSharedMemory},
		{name: "/dev/shm in a df line", log: "shm              64M     0   64M   0% /dev/shm\nINFO: mounting /dev/shm with size=8g\n",
			kind: KindNone, rank: -1},
		{name: "a bus error that is not a DataLoader worker's", log: "Bus error (core dumped)\n",
			kind: KindCrash, rank: -1, reason: "bus error", check: notSharedMemory},
	})
}

// formSample is a sample log under testdata/forms with what it must give.
type formSample struct {
	file   string
	kind   Kind
	reason string
	check  func(t *testing.T, v Verdict)
}

func runSamples(t *testing.T, samples []formSample) {
	t.Helper()
	for _, s := range samples {
		t.Run(s.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "forms", s.file))
			if err != nil {
				t.Fatal(err)
			}
			v := classifyString(t, string(data), ClassifierOptions{})
			if v.Kind != s.kind || !strings.Contains(v.Reason, s.reason) {
				t.Fatalf("kind %s reason %q (line %d: %q), want %s with %q", v.Kind, v.Reason, v.Line, v.Text, s.kind, s.reason)
			}
			if s.check != nil {
				s.check(t, v)
			}
		})
	}
}

func TestSharedMemorySamples(t *testing.T) {
	runSamples(t, []formSample{
		{"shm-dataloader-docker.log", KindHostOOM, "shared memory", func(t *testing.T, v Verdict) {
			sharedMemory(t, v)
			if v.Line != 11 || v.Phase != PhaseTrain {
				t.Errorf("line %d phase %q, want the torch_ file line (11) in training", v.Line, v.Phase)
			}
		}},
		{"shm-bus-error-worker-only.log", KindHostOOM, "bus error", sharedMemory},
		{"disk-full-checkpoint.log", KindCrash, "", notSharedMemory},
		{"shm-too-many-open-files.log", KindCrash, "unable to open shared memory object", notSharedMemory},
	})
}

func TestCPUAllocForms(t *testing.T) {
	format := func(want string, req int64) func(t *testing.T, v Verdict) {
		return func(t *testing.T, v Verdict) {
			t.Helper()
			if v.OOM == nil || v.OOM.Format != want {
				t.Fatalf("oom %+v, want format %q", v.OOM, want)
			}
			if req >= 0 {
				wantBytes(t, "requested", v.OOM.RequestedBytes, req)
			} else if v.OOM.RequestedBytes != nil {
				t.Errorf("requested %d, want none", *v.OOM.RequestedBytes)
			}
		}
	}
	runCases(t, []classifyCase{
		{name: "terminate with bad_alloc", log: "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\nAborted (core dumped)\n",
			kind: KindCPUAllocOOM, rank: -1, reason: "std::bad_alloc", check: func(t *testing.T, v Verdict) {
				format("cpp_bad_alloc", -1)(t, v)
				if v.Line != 1 || !strings.Contains(v.Diagnosis, "operator new") {
					t.Errorf("line %d diagnosis %q", v.Line, v.Diagnosis)
				}
			}},
		{name: "what line alone", log: "  what():  std::bad_alloc\n", kind: KindCPUAllocOOM, rank: -1, check: format("cpp_bad_alloc", -1)},
		{name: "bad_alloc passed on as an exception", log: "[rank2]: RuntimeError: std::bad_alloc\n", kind: KindCPUAllocOOM, rank: 2,
			check: func(t *testing.T, v Verdict) {
				format("cpp_bad_alloc", -1)(t, v)
				if v.OOM.Exception != "RuntimeError" {
					t.Errorf("exception %q", v.OOM.Exception)
				}
			}},
		{name: "pybind11 MemoryError from bad_alloc", log: "MemoryError: std::bad_alloc\n", kind: KindCPUAllocOOM, rank: -1, check: format("cpp_bad_alloc", -1)},
		{name: "numpy 1.x with size", log: "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.73 GiB for an array with shape (500000000,) and data type float64\n",
			kind: KindCPUAllocOOM, rank: -1, check: format("numpy", rnd(3.73*gib))},
		{name: "numpy 2 module path", log: "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 12.0 MiB for an array with shape (1572864,) and data type float64\n",
			kind: KindCPUAllocOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				format("numpy", 12*mib)(t, v)
				if v.OOM.Exception != "numpy._core._exceptions._ArrayMemoryError" {
					t.Errorf("exception %q", v.OOM.Exception)
				}
			}},
		{name: "numpy keeps the point of a whole value", log: "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 100. GiB for an array with shape (100000, 134218) and data type float64\n",
			kind: KindCPUAllocOOM, rank: -1, check: format("numpy", 100*gib)},
		{name: "numpy in bytes", log: "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 800 bytes for an array with shape (100,) and data type float64\n",
			kind: KindCPUAllocOOM, rank: -1, check: format("numpy", 800)},
		{name: "numpy 1.16 MemoryError without size", log: "numpy.core._exceptions.MemoryError: Unable to allocate array with shape (60000, 784, 784) and data type float64\n",
			kind: KindCPUAllocOOM, rank: -1, check: format("python_memory_error", -1)},
		{name: "bare MemoryError after a traceback", log: "Traceback (most recent call last):\n  File \"prep.py\", line 40, in <module>\n    feats = [extract(x) for x in rows]\nMemoryError\n",
			kind: KindCPUAllocOOM, rank: -1, check: format("python_memory_error", -1)},
		{name: "MemoryError glued to a bar", log: "  3%|3         | 30/1000 [00:04<02:10]MemoryError: \n", kind: KindCPUAllocOOM, rank: -1},

		// Look-alikes.
		{name: "MemoryError inside a log line", log: "INFO:data: no MemoryError seen while caching shard 3\nWARNING: retrying after MemoryError\n", kind: KindNone, rank: -1},
		{name: "MemoryError in traceback source lines", log: "    except MemoryError:\n    raise MemoryError(\"too big\")\n", kind: KindNone, rank: -1},
		{name: "a logged MemoryError counter", log: "stats: MemoryError=0 TimeoutError=0\n", kind: KindNone, rank: -1},
		{name: "bad_alloc in source and prose", log: "    } catch (const std::bad_alloc& e) {\nnote: std::bad_alloc handling enabled\n", kind: KindNone, rank: -1},
	})
}

func TestCPUAllocSamples(t *testing.T) {
	runSamples(t, []formSample{
		{"bad-alloc-terminate.log", KindCPUAllocOOM, "std::bad_alloc", func(t *testing.T, v Verdict) {
			if v.Line != 4 || v.Step == nil || *v.Step != 1200 {
				t.Errorf("line %d step %s, want line 4 at step 1200", v.Line, fmtPtr(v.Step))
			}
		}},
		{"numpy-array-memory-error.log", KindCPUAllocOOM, "", func(t *testing.T, v Verdict) {
			wantBytes(t, "requested", v.OOM.RequestedBytes, rnd(3.73*gib))
		}},
		{"memory-error-in-log-lines.log", KindNone, "", nil},
	})
}

func TestSlurmLimitForms(t *testing.T) {
	figures := func(used, limit int64, words string) func(t *testing.T, v Verdict) {
		return func(t *testing.T, v Verdict) {
			t.Helper()
			if v.OOM == nil || v.OOM.Format != "slurm_memory_limit" {
				t.Fatalf("oom %+v", v.OOM)
			}
			wantBytes(t, "in use", v.OOM.InUseBytes, used)
			wantBytes(t, "limit", v.OOM.TotalBytes, limit)
			if !strings.Contains(v.Diagnosis, words) || !strings.Contains(strings.Join(v.Suggestions, " "), "--mem") {
				t.Errorf("diagnosis %q, suggestions %q", v.Diagnosis, v.Suggestions)
			}
		}
	}
	runCases(t, []classifyCase{
		{name: "job exceeded memory limit in KiB", log: "slurmstepd: error: Job 1234 exceeded memory limit (4104892 > 4096000), being killed\n",
			kind: KindHostOOM, rank: -1, reason: "Slurm", check: figures(4104892<<10, 4096000<<10, "Job 1234 using 4009 MiB of memory against its limit of 4000 MiB")},
		{name: "step exceeded memory limit", log: "slurmstepd: error: Step 881204.0 exceeded memory limit (16812544 > 16777216), being killed\n",
			kind: KindHostOOM, rank: -1, check: figures(16812544<<10, 16<<30, "Step 881204.0 using 16.03 GiB of memory against its limit of 16.00 GiB")},
		{name: "StepId form in bytes", log: "slurmstepd-gpu07: error: StepId=4242.0 exceeded memory limit (68736253952 > 68719476736), being killed\n",
			kind: KindHostOOM, rank: -1, check: figures(68736253952, 64<<30, "StepId=4242.0 using")},
		{name: "virtual memory limit", log: "slurmstepd: error: Job 77 exceeded virtual memory limit (9437184 > 8388608), being killed\n",
			kind: KindHostOOM, rank: -1, reason: "virtual memory", check: figures(9<<30, 8<<30, "of virtual memory")},
		{name: "task/cgroup job limit", log: "slurmstepd: error: Exceeded job memory limit\n", kind: KindHostOOM, rank: -1, reason: "job memory limit"},
		{name: "task/cgroup step limit", log: "slurmstepd: error: Exceeded step memory limit at some point.\n", kind: KindHostOOM, rank: -1, reason: "step memory limit"},
		{name: "cut at the start of the word", log: "xceeded step memory limit at some point.\n", kind: KindHostOOM, rank: -1, reason: "step memory limit"},
		{name: "then the oom-kill events refine it", log: "slurmstepd: error: Job 1234 exceeded memory limit (4104892 > 4096000), being killed\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=1234.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.\n",
			kind: KindHostOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				if v.Line != 1 || !strings.Contains(v.Diagnosis, "4009 MiB") {
					t.Errorf("line %d diagnosis %q", v.Line, v.Diagnosis)
				}
			}},

		// Look-alikes.
		{name: "other limits exceeded", log: "WARNING: Rate limit exceeded, retrying in 4s\nerror: context deadline exceeded\nmax_len exceeded memory budget estimate, truncating\n", kind: KindNone, rank: -1},
		{name: "exceeded memory limit without figures", log: "note: the cache exceeded memory limit (soft) once\n", kind: KindNone, rank: -1},
	})
}

func TestSlurmLimitSamples(t *testing.T) {
	runSamples(t, []formSample{
		{"slurm-exceeded-memory-limit.log", KindHostOOM, "Slurm", func(t *testing.T, v Verdict) {
			wantBytes(t, "in use", v.OOM.InUseBytes, 4104892<<10)
			if v.Line != 3 || v.Phase != PhaseTrain {
				t.Errorf("line %d phase %q", v.Line, v.Phase)
			}
		}},
	})
}

func TestKilledForms(t *testing.T) {
	advice := func(want, not string) func(t *testing.T, v Verdict) {
		return func(t *testing.T, v Verdict) {
			t.Helper()
			sug := strings.Join(v.Suggestions, " ")
			if !strings.Contains(sug, want) || not != "" && strings.Contains(sug, not) {
				t.Errorf("suggestions %q: want %q, not %q", sug, want, not)
			}
		}
	}
	runCases(t, []classifyCase{
		{name: "zsh killed", log: "zsh: killed     python train.py --config configs/base.yaml\n", kind: KindHostOOM, rank: -1, reason: "SIGKILL"},
		{name: "zsh job notice", log: "[1]  + killed     python train.py\n", kind: KindHostOOM, rank: -1, reason: "SIGKILL"},
		{name: "zsh job notice with pid", log: "[1]    21086 killed     python3 train.py --bs 64\n", kind: KindHostOOM, rank: -1, reason: "SIGKILL"},
		{name: "bash job notice", log: "[2]+  Killed                  nohup python train.py > train.log 2>&1\n", kind: KindHostOOM, rank: -1, reason: "SIGKILL"},
		{name: "Kubernetes pod status", log: "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n",
			kind: KindHostOOM, rank: -1, reason: "OOMKilled", check: advice("resources.limits.memory", "Slurm")},
		{name: "kubectl exec exit code 137", log: "command terminated with exit code 137 (OOMKilled)\n", kind: KindHostOOM, rank: -1, reason: "OOMKilled", check: advice("docker run --memory", "Slurm")},
		{name: "pod reason in JSON", log: `{"containerID": "containerd://4f1e", "exitCode": 137, "reason": "OOMKilled"}` + "\n", kind: KindHostOOM, rank: -1, reason: "OOMKilled"},
		{name: "DeepSpeed launcher -9", log: "[2024-01-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 40211\n[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed', 'ds.json'] exits with return code = -9\n",
			kind: KindHostOOM, rank: -1, reason: "SIGKILL", check: func(t *testing.T, v Verdict) {
				if v.Line != 2 || !strings.Contains(v.Diagnosis, "local rank 1 exited with return code -9") || !strings.Contains(v.Diagnosis, "does not prove") {
					t.Errorf("line %d diagnosis %q", v.Line, v.Diagnosis)
				}
			}},
		{name: "DeepSpeed launcher 1 is not memory", log: "[ERROR] [launch.py:321:sigkill_handler] ['python', 'train.py', '--local_rank=0'] exits with return code = 1\n",
			kind: KindCrash, rank: -1, reason: "exited with code 1"},

		// Look-alikes.
		{name: "killed in prose", log: "INFO: zombie workers killed: 0\nthe watchdog killed nothing this epoch\n[1] killed workers are restarted by the pool\n[2]  + killed the stale lock\n", kind: KindNone, rank: -1},
		{name: "docker inspect OOMKilled false", log: "            \"OOMKilled\": false,\n            \"Dead\": false,\n", kind: KindNone, rank: -1},
		{name: "DeepSpeed launcher 0", log: "[INFO] [launch.py:347:main] Process 40211 exits successfully.\n[INFO] ['python', 'train.py'] exits with return code = 0\n", kind: KindNone, rank: -1},
	})
}

func TestKilledSamples(t *testing.T) {
	runSamples(t, []formSample{
		{"k8s-oomkilled.log", KindHostOOM, "OOMKilled", nil},
		{"deepspeed-return-code-9.log", KindHostOOM, "SIGKILL", func(t *testing.T, v Verdict) {
			if v.Step == nil || *v.Step != 11 {
				t.Errorf("step %s, want 11", fmtPtr(v.Step))
			}
		}},
	})
}

func TestWrappedAtASentence(t *testing.T) {
	device := func(dev string, req int64) func(t *testing.T, v Verdict) {
		return func(t *testing.T, v Verdict) {
			t.Helper()
			o := v.OOM
			wantBytes(t, "requested", o.RequestedBytes, req)
			wantBytes(t, "total", o.TotalBytes, rnd(47.50*gib))
			wantBytes(t, "free", o.FreeBytes, rnd(194.56*mib))
			if o.Device == nil || *o.Device != dev || v.Line != 1 {
				t.Errorf("device %s line %d", fmtPtr(o.Device), v.Line)
			}
			if !strings.Contains(v.Diagnosis, "It asked for 300 MiB on "+dev+", which had 47.50 GiB in total and 195 MiB free") {
				t.Errorf("diagnosis %q", v.Diagnosis)
			}
		}
	}
	rest := "GPU 3 has a total capacity of 47.50 GiB of which 194.56 MiB is free. Including non-PyTorch memory, this process has 47.30 GiB memory in use. Of the allocated memory 46.71 GiB is allocated by PyTorch, and 301.12 MiB is reserved by PyTorch but unallocated.\n"
	runCases(t, []classifyCase{
		{name: "period lost with the break", log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 MiB\n" + rest,
			kind: KindGPUOOM, rank: -1, check: device("GPU 3", 300*mib)},
		{name: "period kept before the break", log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 MiB.\n" + rest,
			kind: KindGPUOOM, rank: -1, check: device("GPU 3", 300*mib)},
		{name: "rank-prefixed", log: "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 MiB\n[rank3]: " + rest,
			kind: KindGPUOOM, rank: 3, check: device("GPU 3", 300*mib)},
		{name: "a wrap inside the unit still joins without a space", log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 Mi\nB. " + rest,
			kind: KindGPUOOM, rank: -1, check: device("GPU 3", 300*mib)},
	})
}

func TestSizeWords(t *testing.T) {
	for b, want := range map[int64]string{
		0:                 "0 bytes",
		512:               "512 bytes",
		812 << 10:         "812 KiB",
		12 << 20:          "12.0 MiB",
		rnd(3.25 * mib):   "3.25 MiB",
		rnd(194.56 * mib): "195 MiB",
		1<<30 - 1:         "1024 MiB",
		1 << 30:           "1.00 GiB",
		rnd(15.82 * gib):  "15.82 GiB",
	} {
		if got := sizeWords(b); got != want {
			t.Errorf("sizeWords(%d) = %q, want %q", b, got, want)
		}
	}
	// The diagnosis says 12.0 MiB, not 0.01 GiB.
	v := classifyString(t, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 3.25 MiB is free. Of the allocated memory 6.90 GiB is allocated by PyTorch, and 101.35 MiB is reserved by PyTorch but unallocated.\n", ClassifierOptions{})
	if !strings.Contains(v.Diagnosis, "asked for 12.0 MiB on GPU 0, which had 7.79 GiB in total and 3.25 MiB free") || strings.Contains(v.Diagnosis, "0.01 GiB") {
		t.Errorf("diagnosis %q", v.Diagnosis)
	}
}

func TestWrappedSamples(t *testing.T) {
	runSamples(t, []formSample{
		{"wrapped-torch-oom-postmortem.log", KindGPUOOM, "CUDA out of memory", func(t *testing.T, v Verdict) {
			wantBytes(t, "requested", v.OOM.RequestedBytes, 300*mib)
			if v.OOM.Device == nil || *v.OOM.Device != "GPU 3" || v.Rank == nil || *v.Rank != 3 || v.Phase != PhaseVal {
				t.Errorf("device %s rank %s phase %q", fmtPtr(v.OOM.Device), fmtPtr(v.Rank), v.Phase)
			}
			wantBytes(t, "reserved unallocated", v.OOM.ReservedUnallocatedBytes, rnd(301.12*mib))
		}},
	})
}

package classify

// Failure detectors. Each recognises one family of messages by its fixed
// words and returns a candidate failure; Classifier.record decides whether it
// becomes (or refines) the verdict.

import (
	"bytes"
	"strings"
)

// Failure classes: a stronger class replaces a weaker failure seen earlier.
const (
	classWrapper  = 0 // a launcher's report that a worker failed (torchrun's ChildFailedError)
	classGeneric  = 1 // an exception or exit status that names no known cause
	classSpecific = 2 // a known failure that is not memory
	classMemory   = 3 // the job ran out of memory
)

func memFailure(k Kind, reason, family string) failure {
	return failure{kind: k, class: classMemory, reason: reason, family: family, rank: -1, st: noStep, epoch: -1}
}

func crashFailure(class int, reason, family string) failure {
	return failure{kind: KindCrash, class: class, reason: reason, family: family, rank: -1, st: noStep, epoch: -1}
}

// gpuOOM starts a gpu_oom candidate with an OOM of the given format, the
// exception printed before index at of t.
func gpuOOM(t []byte, at int, format string) (failure, *OOM) {
	f := memFailure(KindGPUOOM, "GPU out of memory", format)
	o := &OOM{Format: format, Exception: exceptionBefore(t, at)}
	f.oom = o
	return f, o
}

// detectFailure runs the failure detectors on a line (after its prefixes).
func (c *Classifier) detectFailure(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwAutoBatch) {
		c.autoBatchLine(t)
	}
	if h.has(kwExpandable) {
		c.expandableLine(t)
	}
	if h.has(kwRootCause) && bHas(t, "Root Cause (first observed failure)") {
		c.block = rootCauseBlock{active: true, line: c.num, rank: -1}
		return failure{}, false
	}
	if f, ok := reportOrAllocForm(t, h); ok {
		return f, true
	}
	inProbe := c.abUntil >= c.num
	if h.has(kwOutOfMem) && bHas(t, "out of memory occurred when warming up ") {
		if f, ok := vllmWarmupLine(t); ok {
			c.engineRelabel(&f)
			return f, true
		}
	}
	if h.has(kwOutOfMem) {
		if f, ok := outOfMemory(t, h.at(kwOutOfMem)); ok {
			if inProbe && f.kind == KindGPUOOM {
				return failure{}, false
			}
			return f, true
		}
	}
	if f, ok := c.deviceStatusLine(t, h); ok {
		return f, true
	}
	if f, ok := hostAllocLine(t, h); ok {
		return f, true
	}
	if f, ok := c.killLine(t, h); ok {
		return f, true
	}
	return c.errorLine(t, h)
}

// reportOrAllocForm reads a host-memory reporter's line (host_reporters.go),
// Windows' commit failure and the allocators' own forms (alloc_forms.go).
func reportOrAllocForm(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwMemoryError) || h.has(kwOOM) || h.has(kwLowOnMem) || h.has(kwLowOnRes) || h.has(kwAllRAM) {
		if f, ok := hostReporterLine(t); ok {
			return f, true
		}
	}
	if h.has(kwError) && bHas(t, "WinError 1455") {
		// "OSError: [WinError 1455] The paging file is too small for this
		// operation to complete": Windows could not commit more virtual
		// memory (each DataLoader worker loads the CUDA libraries again).
		f := memFailure(KindCPUAllocOOM, "host memory allocation failed (the Windows paging file is too small, WinError 1455)", "windows_commit")
		f.oom = &OOM{Format: "win_paging_file", Exception: exceptionBefore(t, bIndex(t, "[WinError 1455]"))}
		f.detail = "Windows refused to commit more virtual memory: RAM plus the paging file are used up"
		return f, true
	}
	if (h.has(kwError) || h.has(kwOutOfMem)) && (bHas(t, "Failed to allocate ") || bHas(t, "allocated so far: ") || bHas(t, "in replica ") || bHas(t, "Out of memory error on ")) {
		if f, ok := allocFormLine(t); ok {
			return f, true
		}
	}
	return failure{}, false
}

// deviceStatusLine reads a device library's allocation status, TensorFlow's
// and XLA's exhausted resources, a serving engine's refusal and a
// run-time's out-of-memory status code.
func (c *Classifier) deviceStatusLine(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwAllocFailed) {
		for _, lib := range [...]string{"CUBLAS", "CUDNN", "CUSOLVER", "CUSPARSE", "CUFFT"} {
			if i := bIndex(t, lib+"_STATUS_ALLOC_FAILED"); i >= 0 || lib == "CUFFT" && bHas(t, "CUFFT_ALLOC_FAILED") {
				if i < 0 {
					i = bIndex(t, "CUFFT_ALLOC_FAILED")
				}
				f, _ := gpuOOM(t, i, strings.ToLower(lib)+"_alloc_failed")
				f.reason = "GPU out of memory (" + lib + " could not allocate)"
				return f, true
			}
		}
	}
	if h.has(kwExhausted) || h.has(kwOOM) {
		if f, ok := exhaustedOrOOM(t, h); ok {
			if f.oom != nil && (f.oom.Format == "tf_oom_tensor" || f.oom.Format == fmtTFFailedAlloc) && tfHead(c.cur, c.num, c.rank) {
				// "ResourceExhaustedError: Graph execution error:", then
				// the "Detected at node" block, then the OOM line: the OOM
				// line, with its figures, is the failure.
				if f.oom.Exception == "" {
					f.oom.Exception = c.cur.oom.Exception
				}
				c.cur = nil
			}
			return f, true
		}
	}
	if h.has(kwKVCache) || h.has(kwCacheBlocks) || h.has(kwDesiredGPU) || h.has(kwNotEnough) {
		if f, ok := engineLine(t, h); ok {
			c.engineRelabel(&f)
			return f, true
		}
	}
	if h.has(kwOutOf) {
		if f, ok := outOfLine(t); ok {
			return f, true
		}
	}
	return failure{}, false
}

// hostAllocLine reads an allocation of host memory that failed: PyTorch's
// CPU allocator, shared memory, NumPy, Intel's platform limit, NCCL's
// calloc, std::bad_alloc, Python's MemoryError.
func hostAllocLine(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwCPUAlloc) || h.has(kwNotEnough) {
		if i := bIndex(t, "you tried to allocate "); i >= 0 && (bHas(t, "CPUAllocator") || bHas(t, "not enough memory")) {
			f := memFailure(KindCPUAllocOOM, "host memory allocation failed (PyTorch CPU allocator)", "cpu")
			o := &OOM{Format: "cpu_allocator", Exception: exceptionBefore(t, i)}
			if v, ok := memSizeAfter(t, "you tried to allocate "); ok {
				o.RequestedBytes = valPtr(v)
			}
			if !bHas(t, "CPUAllocator") {
				o.Format = "th_not_enough_memory"
			}
			f.oom = o
			return f, true
		}
		if f, ok := posixMemalign(t); ok {
			return f, true
		}
	}
	if h.has(kwBusError) || (h.has(kwError) || h.has(kwUnableAlloc)) && (bHas(t, "/torch_") || bHas(t, "/dev/shm")) {
		// Every shared-memory message but the bus error's is an exception
		// or an error line, or says "unable to allocate": the path is
		// searched only on such lines, which keeps the prefilter's anchors
		// off "/dev/shm" and "torch_", common in ordinary output.
		if f, ok := sharedMemoryLine(t, h); ok {
			return f, true
		}
	}
	if h.has(kwUnableAlloc) {
		// NumPy: "Unable to allocate 3.00 GiB for an array with shape (...)"
		i := indexFoldASCII(t, "unable to allocate")
		if v, _, ok := parseMemSize(trimSpaceLeft(t[i+len("unable to allocate"):])); ok {
			f := memFailure(KindCPUAllocOOM, "host memory allocation failed", "numpy")
			f.oom = &OOM{Format: "numpy", Exception: exceptionBefore(t, i), RequestedBytes: valPtr(v)}
			if mentionsGPU(t) {
				f.kind, f.reason, f.oom.Format = KindGPUOOM, "GPU out of memory", "other"
			}
			return f, true
		}
	}
	if h.has(kwCanNot) {
		// Intel Extension for PyTorch: "Current platform can NOT allocate
		// memory block with size larger than 4GB! Tried to allocate ..."
		i := bIndex(t, "Current platform")
		if i < 0 {
			i = bIndex(t, "can NOT allocate")
		}
		f, o := gpuOOM(t, i, "old_xpu")
		parseTorchOOM(t[i:], o, &f.extra)
		o.Format = "old_xpu"
		f.family = "torch"
		return f, true
	}
	if h.has(kwCalloc) {
		if i := bIndex(t, "CUDA calloc "); i >= 0 {
			f, o := gpuOOM(t, i, "nccl_cuda_oom")
			f.reason = "GPU out of memory (NCCL allocation)"
			if v, ok := memSizeAfter(t, "CUDA calloc "); ok {
				o.RequestedBytes = valPtr(v)
			}
			return f, true
		}
	}
	if h.has(kwBadAlloc) {
		if f, ok := badAllocLine(t); ok {
			return f, true
		}
	}
	if h.has(kwMemoryError) {
		if f, ok := memoryErrorLine(t); ok {
			return f, true
		}
	}
	return failure{}, false
}

// killLine reads a kill: Slurm's limit, a compiler killed while building, a
// shell's or launcher's report, an exit status, a SIGKILL.
func (c *Classifier) killLine(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwExceeded) {
		if f, ok := slurmLimitLine(t); ok {
			return f, true
		}
	}
	if h.has(kwKilled) || h.has(kwSignal9) {
		if f, ok := buildKilledLine(t); ok {
			if cur := c.cur; cur != nil && cur.kind == KindHostOOM && cur.family != buildFamily && !cur.shm && c.num-cur.lastLine <= 30 {
				asBuild(cur, &f) // make's bare "Killed" came first
			}
			return f, true
		}
	}
	if h.has(kwKilled) {
		if f, ok := killedLine(t); ok {
			return f, true
		}
	}
	if h.has(kwExit) {
		if f, ok := exitLine(t); ok {
			return f, true
		}
	}
	if h.has(kwSIGKILL) || h.has(kwSignal9) {
		for _, s := range [...]string{"(SIGKILL) received by PID", "terminated with signal SIGKILL", "signal 9: SIGKILL",
			"terminated by signal SIGKILL", "Signals.SIGKILL", "killed by signal 9", "Killed by signal 9"} {
			if bHas(t, s) {
				f := memFailure(KindHostOOM, "killed by SIGKILL", "sigkill")
				f.lowConf = true
				if i := bIndex(t, "process "); i >= 0 && bHas(t, "terminated with signal") {
					if v, _, ok := scanInt(t[i+len("process "):]); ok {
						f.detail = "worker process " + itoa(v) + " (torch.multiprocessing) was killed by SIGKILL"
					}
				}
				return f, true
			}
		}
	}
	if h.has(kwTerminated) && bHas(t, "zsh: terminated") {
		f := memFailure(KindHostOOM, "terminated by a signal (zsh: terminated)", "shell")
		f.lowConf = true
		f.detail = "the shell reports the job was terminated by a signal; out-of-memory daemons (earlyoom, systemd-oomd) end processes this way"
		return f, true
	}
	return failure{}, false
}

// errorLine reads a known crash, any other exception line, and a bare
// "Killed" at the start of a line.
func (c *Classifier) errorLine(t []byte, h *hitSet) (failure, bool) {
	if f, ok := crashLine(t, h); ok {
		return f, true
	}
	if h.has(kwError) || h.has(kwException) {
		if f, ok := exceptionLine(t); ok {
			return f, true
		}
	}
	if c.isAnchoredKilled(t) {
		f := memFailure(KindHostOOM, "killed by SIGKILL (the shell reports it)", "shell")
		f.detail = "the shell printed \"" + string(trimSpace(t)) + "\" (SIGKILL)"
		return f, true
	}
	return failure{}, false
}

// shmReason is the reason of every shared-memory failure: the policy and
// the diagnosis tell it from other host OOMs by Verdict.SharedMemory.
const shmReason = "shared memory (/dev/shm) exhausted"

// shmFailure is a host_oom for an exhausted /dev/shm: a tmpfs, that is RAM,
// of its own size (64 MiB in a Docker container by default), which DataLoader
// workers fill with the batches they hand to the main process.
func shmFailure(how string) failure {
	f := memFailure(KindHostOOM, shmReason+": "+how, "shm")
	f.shm = true
	return f
}

// sharedMemoryLine recognises an exhausted /dev/shm:
//
//   - the DataLoader worker's SIGBUS handler: "ERROR: Unexpected bus error
//     encountered in worker. This might be caused by insufficient shared
//     memory (shm)." (PaddlePaddle's says "BUS error ... DataLoader worker");
//   - PyTorch's shared-memory allocator writing a tensor to a "/torch_..."
//     file: "unable to write to file </torch_18_...>: No space left on device
//     (28)" (older releases stop at the file name), "unable to allocate shared
//     memory(shm) for file </torch_...>: No space left on device (28)",
//     "unable to mmap N bytes from file </torch_...>: Cannot allocate memory
//     (12)";
//   - any "No space left on device" about a path under /dev/shm (NCCL's
//     "failed to extend /dev/shm/nccl-..." too).
//
// "Too many open files" about a torch_ file is the descriptor limit, not
// memory, and a full disk anywhere else is not memory either.
func sharedMemoryLine(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwBusError) && (bHas(t, "insufficient shared memory") || bHas(t, "shared memory (shm)")) {
		f := shmFailure("a DataLoader worker died of a bus error")
		f.detail = "the DataLoader worker's bus-error handler says shared memory (shm) is insufficient"
		return f, true
	}
	if bHas(t, "Too many open files") {
		return failure{}, false
	}
	if i := bIndex(t, "</torch_"); i >= 0 {
		name := t[i+1:]
		if e := bytes.IndexByte(name, '>'); e > 0 && e < 64 {
			name = name[:e]
		} else {
			name = nil
		}
		what := ""
		switch {
		case bHas(t, "No space left on device"):
			what = "no space left on device"
		case bHas(t, "Cannot allocate memory"):
			what = "cannot allocate memory"
		case bHas(t[:i], "unable to write to file") || bHas(t[:i], "unable to allocate shared memory"):
			what = "the write failed"
		}
		if what != "" {
			f := shmFailure("PyTorch could not write a tensor to shared memory")
			f.detail = "PyTorch's shared-memory file " + string(name) + " under /dev/shm: " + what
			return f, true
		}
	}
	if bHas(t, "/dev/shm") && (bHas(t, "No space left on device") || bHas(t, "failed to extend /dev/shm")) {
		f := shmFailure("no space left on /dev/shm")
		f.detail = "a write to /dev/shm failed: " + clipText(string(trimSpace(t)), 200)
		return f, true
	}
	return failure{}, false
}

// badAllocLine recognises C++'s std::bad_alloc, which operator new throws
// when malloc fails: the runtime's "terminate called after throwing an
// instance of 'std::bad_alloc'" and its "  what():  std::bad_alloc", and an
// exception line that passes it on ("RuntimeError: std::bad_alloc"). A
// mention elsewhere (a source line, "catch (std::bad_alloc&)") is not one.
func badAllocLine(t []byte) (failure, bool) {
	tt := trimSpace(t)
	ok := bHas(t, "instance of 'std::bad_alloc'") || bHasPrefix(tt, "what():") && bytes.HasSuffix(tt, []byte("std::bad_alloc"))
	exc := ""
	if !ok {
		// "SomeError: std::bad_alloc" at the start of the line.
		i := bIndex(t, ": std::bad_alloc")
		if i < 0 || !bytes.HasSuffix(tt, []byte("std::bad_alloc")) {
			return failure{}, false
		}
		exc = identBefore(t, i)
		if exc == "" || len(trimSpace(t[:i-len(exc)])) > 0 {
			return failure{}, false
		}
	}
	f := memFailure(KindCPUAllocOOM, "host memory allocation failed (C++ std::bad_alloc)", "bad_alloc")
	f.oom = &OOM{Format: "cpp_bad_alloc", Exception: exc}
	f.detail = "a C++ allocation (operator new) failed and threw std::bad_alloc; a size computed wrong (negative or huge) throws it too"
	return f, true
}

// memoryErrorLine recognises Python's MemoryError as a traceback ends it:
// "MemoryError" alone, "MemoryError: ...", a module-qualified subclass
// ("numpy.core._exceptions.MemoryError: Unable to allocate array with shape
// ..."), at the start of the line or glued to a progress bar as any exception
// line may be. The word inside other text ("no MemoryError seen", "except
// MemoryError:", "raise MemoryError") is not one.
func memoryErrorLine(t []byte) (failure, bool) {
	i := bIndex(t, "MemoryError")
	if i < 0 || bHas(t, "OutOfMemoryError") {
		return failure{}, false
	}
	end := i + len("MemoryError")
	rest := t[end:]
	if !(len(trimSpace(rest)) == 0 || rest[0] == ':') {
		return failure{}, false
	}
	name := identBefore(t, end)
	if name == "" {
		return failure{}, false
	}
	if lead := trimSpace(t[:end-len(name)]); len(lead) > 0 {
		switch lead[len(lead)-1] {
		case ']', '|', '-', '>', '`', '"':
		default:
			return failure{}, false
		}
	}
	f := memFailure(KindCPUAllocOOM, "host memory allocation failed (Python MemoryError)", "python")
	f.oom = &OOM{Format: "python_memory_error", Exception: name}
	f.emptyMsg = len(trimSpace(bytes.TrimPrefix(rest, []byte(":")))) == 0
	if len(rest) > 0 {
		if v, ok := memSizeAfter(rest, "allocate "); ok {
			f.oom.RequestedBytes = valPtr(v)
		}
		if bHas(rest, "std::bad_alloc") {
			f.oom.Format = "cpp_bad_alloc" // pybind11 turns std::bad_alloc into MemoryError
		}
	}
	return f, true
}

const mibBytes = 1 << 20

// slurmLimitLine recognises slurmstepd's own memory enforcement, older than
// its cgroup's oom-kill events:
//
//   - the accounting plugin's "Job 1234 exceeded memory limit (4104892 >
//     4096000), being killed" (also "Step 1234.0", and "virtual memory
//     limit"): used > limit in KiB; Slurm 20.11 and later print the step as
//     "StepId=1234.0" (or "JobId=1234") and the figures in bytes;
//   - the task/cgroup plugin's "Exceeded job memory limit" and "Exceeded
//     step memory limit at some point."
func slurmLimitLine(t []byte) (failure, bool) {
	if i := bIndex(t, "xceeded job memory limit"); i > 0 || bHas(t, "xceeded step memory limit") {
		f := memFailure(KindHostOOM, "killed by Slurm for memory (job memory limit exceeded)", "slurm")
		if i < 0 {
			f.reason = "killed by Slurm for memory (step memory limit exceeded)"
		}
		f.detail = "Slurm's step daemon reports: " + clipText(string(trimSpace(t[max(bIndex(t, "xceeded")-1, 0):])), 120)
		return f, true
	}
	i := bIndex(t, " exceeded memory limit (")
	n := len(" exceeded memory limit (")
	virt := false
	if i < 0 {
		i, n, virt = bIndex(t, " exceeded virtual memory limit ("), len(" exceeded virtual memory limit ("), true
	}
	if i < 0 {
		return failure{}, false
	}
	used, un, ok1 := scanInt(t[i+n:])
	r := t[i+n+un:]
	if !ok1 || !bHasPrefix(r, " > ") {
		return failure{}, false
	}
	limit, ln, ok2 := scanInt(r[len(" > "):])
	if !ok2 || !bHasPrefix(r[len(" > ")+ln:], ")") {
		return failure{}, false
	}
	// The step, as the message names it: the word or two before.
	head := t[:i]
	s := bytes.LastIndexByte(head, ' ') + 1
	if w := head[s:]; !bytes.HasPrefix(w, []byte("StepId=")) && !bytes.HasPrefix(w, []byte("JobId=")) {
		if p := bytes.LastIndexByte(head[:max(s-1, 0)], ' ') + 1; s > 0 && (bHasPrefix(head[p:], "Job ") || bHasPrefix(head[p:], "Step ")) {
			s = p
		}
	}
	id := string(head[s:])
	unit := int64(1 << 10) // KiB: "Job N", "Step N.M"
	if strings.HasPrefix(id, "StepId=") || strings.HasPrefix(id, "JobId=") {
		unit = 1
	}
	what := "memory"
	if virt {
		what = "virtual memory"
	}
	f := memFailure(KindHostOOM, "killed by Slurm for memory ("+what+" limit exceeded)", "slurm")
	f.oom = &OOM{Format: "slurm_memory_limit", InUseBytes: valPtr(used * unit), TotalBytes: valPtr(limit * unit)}
	u, l := sizeWords(used*unit), sizeWords(limit*unit)
	if u == l {
		// Slurm's limits are whole MiB (--mem=4000M): 4009 MiB against
		// 4000 MiB reads better than 3.91 GiB against 3.91 GiB.
		u, l = itoa((used*unit+mibBytes/2)/mibBytes)+" MiB", itoa((limit*unit+mibBytes/2)/mibBytes)+" MiB"
	}
	f.detail = "Slurm measured " + id + " using " + u + " of " + what + " against its limit of " + l
	return f, true
}

// mentionsGPU says whether a line talks about a GPU device.
func mentionsGPU(t []byte) bool {
	return indexFoldASCII(t, "cuda") >= 0 || indexFoldASCII(t, "gpu") >= 0 || bHas(t, "HIP") || bHas(t, "XPU") || indexFoldASCII(t, "device") >= 0
}

// outOfMemory handles a line containing "out of memory" (any case); at is
// where it occurs.
func outOfMemory(t []byte, at int) (failure, bool) {
	before := t[:at]
	after := t[at+len("out of memory"):]
	switch {
	case bytes.HasSuffix(before, []byte("CUDA ")) || bytes.HasSuffix(before, []byte("HIP ")) || bytes.HasSuffix(before, []byte("XPU ")):
		if f, ok := torchAllocatorOOM(t, before); ok {
			return f, true
		}
	case bytes.HasSuffix(before, []byte("MPS backend ")):
		f, o := gpuOOM(t, at-len("MPS backend "), "mps")
		f.reason = "MPS out of memory"
		parseMPSOOM(t[at-len("MPS backend "):], o, &f.extra)
		return f, true
	case bytes.HasSuffix(before, []byte("error: ")) || bytes.HasSuffix(before, []byte("Error: ")):
		// "CUDA error: out of memory", "HIP error: out of memory"
		f, o := gpuOOM(t, at, "cuda_error")
		f.reason = "CUDA error: out of memory"
		if bytes.HasSuffix(before, []byte("HIP error: ")) {
			f.reason = "HIP error: out of memory"
		}
		if strings.HasSuffix(o.Exception, "AcceleratorError") {
			// torch >= 2.8: "torch.AcceleratorError: CUDA error: out of memory"
			o.Format = fmtAccelerator
		}
		return f, true
	case bytes.HasSuffix(before, []byte("error=2 : ")) || bytes.HasSuffix(before, []byte("error (2) : ")):
		// pre-1.0 THC: "THCudaCheck FAIL file=... error=2 : out of memory",
		// "cuda runtime error (2) : out of memory at ..."
		f, _ := gpuOOM(t, at, "thc_runtime_error_2")
		f.reason = "CUDA out of memory (THC)"
		return f, true
	case bHas(before, "Cuda failure") || bHas(before, "NCCL WARN"):
		f, _ := gpuOOM(t, at, "nccl_cuda_oom")
		f.reason = "GPU out of memory (NCCL allocation)"
		f.family = "nccl"
		return f, true
	case bHasPrefix(after, ")") && bHas(before, "would exceed allowed memory"):
		return allowedMemoryOOM(t, at)
	case bHasPrefix(after, ": Killed process") || bHasPrefix(after, ": Kill process"):
		// kernel: "Out of memory: Killed process 1204377 (python) total-vm:..."
		// or "Memory cgroup out of memory: Killed process ..."
		f := memFailure(KindHostOOM, "killed by the kernel's out-of-memory killer", "kernel")
		f.detail = kernelKilled(t)
		if bytes.HasSuffix(before, []byte("cgroup ")) {
			f.reason = "killed by the memory cgroup's out-of-memory killer"
		}
		return f, true
	case bytes.HasSuffix(before, []byte(": ")) && bHasPrefix(t[at:], "Out Of Memory"):
		return srunTaskOOM(t, before)
	case bHasPrefix(after, " while trying to allocate") || bHasPrefix(after, " in memory space") ||
		bHasPrefix(after, " allocating ") && (bHas(before, "RESOURCE_EXHAUSTED") || indexFoldASCII(before, "resource exhausted") >= 0):
		return xlaOOM(t, at)
	case bytes.HasSuffix(before, []byte("an ")) || bytes.HasSuffix(before, []byte("Ran ")):
		// TensorFlow's BFC allocator: "Ran out of memory trying to allocate
		// 812.3KiB.  See logs for memory state." The same words followed by
		// "The caller indicates that this is not a failure" are a warning.
		if bHas(t, "not a failure") || bHas(t, "caller indicates") {
			return failure{}, false
		}
		if f, ok := tfRanOutOfMemory(t, at, after); ok {
			return f, true
		}
	}
	// Any other error line that says "out of memory" about a device.
	if mentionsGPU(t) && (bHas(t, "Error") || bHas(t, "error") || bHas(t, "ERROR") || bHas(t, "FAIL")) {
		f, _ := gpuOOM(t, at, "other")
		f.reason = "GPU out of memory"
		return f, true
	}
	return failure{}, false
}

// torchAllocatorOOM reads PyTorch's caching allocator: "CUDA out of
// memory. Tried to allocate ..." (HIP, XPU); before is the text before
// "out of memory".
func torchAllocatorOOM(t, before []byte) (failure, bool) {
	// PyTorch's caching allocator: "CUDA out of memory. Tried to allocate ..."
	start := bytes.LastIndexByte(before[:len(before)-1], ' ') + 1
	if start < 0 {
		start = 0
	}
	word := string(before[start : len(before)-1])
	for _, dev := range [...]string{"CUDA", "HIP", "XPU"} {
		if len(word) > len(dev) && strings.HasSuffix(word, dev) {
			// Glued to the text before it: "run failed.CUDA out of
			// memory." (the message reader's glue rule: the device's
			// name starts the message).
			start += len(word) - len(dev)
			word = dev
		}
	}
	if word != "CUDA" && word != "HIP" && word != "XPU" {
		return failure{}, false
	}
	f, o := gpuOOM(t, start, "modern")
	f.reason = word + " out of memory"
	f.family = "torch"
	if !parseTorchOOM(t[start:], o, &f.extra) {
		// Hard-wrapped: the next lines may complete the message.
		f.wrapped = string(t[start:])
	}
	return f, true
}

// allowedMemoryOOM reads "Allocation on device 1 would exceed allowed
// memory. (out of memory)".
func allowedMemoryOOM(t []byte, at int) (failure, bool) {
	// "torch.cuda.OutOfMemoryError: Allocation on device 1 would exceed
	// allowed memory. (out of memory)"
	i := bIndex(t, "Allocation on device ")
	if i < 0 {
		i = at
	}
	f, o := gpuOOM(t, i, "allowed_memory_exceeded")
	f.reason = "GPU memory limit of the process exceeded"
	if i != at {
		d := t[i+len("Allocation on "):]
		if _, n, ok := scanInt(d[len("device "):]); ok {
			o.Device = valPtr(string(d[:len("device ")+n]))
		}
	}
	f.allowTable = 1
	return f, true
}

// srunTaskOOM reads srun's "error: NODE: task N: Out Of Memory".
func srunTaskOOM(t, before []byte) (failure, bool) {
	// "srun: error: cn-a17: task 0: Out Of Memory"
	f := memFailure(KindHostOOM, "killed by Slurm for memory (task out of memory)", "slurm")
	if i := bIndex(before, "task "); i >= 0 {
		if v, _, ok := scanInt(before[i+len("task "):]); ok {
			f.rank = int(v)
		}
		if j := bIndex(before, "srun: error: "); j >= 0 && j+len("srun: error: ") < i {
			host := bytes.TrimSuffix(trimSpace(before[j+len("srun: error: "):i]), []byte(":"))
			f.host = string(host)
		}
	}
	f.detail = "srun: " + string(trimSpace(t))
	return f, true
}

// xlaOOM reads XLA's RESOURCE_EXHAUSTED allocation failures.
func xlaOOM(t []byte, at int) (failure, bool) {
	i := bIndex(t, "RESOURCE_EXHAUSTED")
	if i < 0 {
		i = indexFoldASCII(t, "resource exhausted")
	}
	if i < 0 {
		i = at
	}
	f, o := gpuOOM(t, i, "xla_resource_exhausted")
	if o.Exception == "" {
		o.Exception = exceptionBefore(t, at)
	}
	f.reason = "XLA out of memory (RESOURCE_EXHAUSTED)"
	parseXLAOOM(t, o, &f.extra)
	return f, true
}

// tfRanOutOfMemory reads TensorFlow's allocators' "ran out of memory" and
// fairseq's caught OOM; after is the text after "out of memory".
func tfRanOutOfMemory(t []byte, at int, after []byte) (failure, bool) {
	switch {
	case bHasPrefix(after, " trying to allocate"):
		f, o := gpuOOM(t, at, "tf_bfc_ran_out")
		f.reason = "GPU out of memory (TensorFlow allocator)"
		if v, ok := memSizeAfter(after, "trying to allocate "); ok {
			o.RequestedBytes = valPtr(v)
		}
		o.Exception = ""
		return f, true
	case bHasPrefix(after, " when allocating"):
		// TF 1.0: "EigenAllocator for GPU ran out of memory when allocating 0."
		f, o := gpuOOM(t, at, "tf_eigen_allocator_fatal")
		f.reason = "GPU out of memory (TensorFlow EigenAllocator)"
		rest := trimSpaceLeft(after[len(" when allocating"):])
		if v, n, ok := scanInt(rest); ok && asciiDigit(rest[0]) {
			if s, _, ok := parseMemSize(rest); ok {
				o.RequestedBytes = valPtr(s)
			} else if n > 0 {
				o.RequestedBytes = valPtr(v)
			}
		}
		o.Exception = ""
		return f, true
	case bHasPrefix(after, ", skipping"), bHasPrefix(after, " with exception"):
		// fairseq caught the OOM and skips the batch.
		f, o := gpuOOM(t, at, "")
		o.Format = "caught"
		f.reason = "GPU out of memory (caught by the framework, batch skipped)"
		return f, true
	}
	return failure{}, false
}

// kernelKilled summarises "Out of memory: Killed process 1204377 (python)
// total-vm:61240388kB, anon-rss:30411256kB, ...".
func kernelKilled(t []byte) string {
	i := bIndex(t, "process ")
	if i < 0 {
		return ""
	}
	r := t[i+len("process "):]
	pid, n, ok := scanInt(r)
	if !ok {
		return ""
	}
	s := "the kernel killed process " + itoa(pid)
	r = r[n:]
	if bHasPrefix(r, " (") {
		if j := bytes.IndexByte(r, ')'); j > 2 && j < 64 {
			s = "the kernel killed " + string(r[2:j]) + " (pid " + itoa(pid) + ")"
		}
	}
	if k := bIndex(t, "anon-rss:"); k >= 0 {
		if v, ok := memSizeAfter(t[k:], "anon-rss:"); ok {
			s += ", which held " + sizeWords(v) + " of RAM"
		}
	}
	return s
}

// exhaustedOrOOM handles RESOURCE_EXHAUSTED, ResourceExhaustedError, "OOM
// when allocating", Slurm's oom-kill events and the kernel's oom-kill lines.
func exhaustedOrOOM(t []byte, h *hitSet) (failure, bool) {
	if i := bIndex(t, "OOM when allocating"); i >= 0 {
		f, o := gpuOOM(t, i, "tf_oom_tensor")
		f.reason = "GPU out of memory (TensorFlow)"
		parseTFOOM(t[i:], o, &f.extra)
		return f, true
	}
	if h.has(kwExhausted) && bHas(t, "ResourceExhaustedError") && bHas(t, "failed to allocate memory") {
		return tfFailedAlloc(t)
	}
	if h.has(kwExhausted) {
		i := bIndex(t, "RESOURCE_EXHAUSTED")
		if i < 0 {
			i = bIndex(t, "Resource exhausted")
		}
		if i >= 0 && (bHas(t[i:], "llocat") || bHas(t[i:], "emory") || bHas(t[i:], "reserve")) {
			f, o := gpuOOM(t, i, "xla_resource_exhausted")
			f.reason = "XLA out of memory (RESOURCE_EXHAUSTED)"
			parseXLAOOM(t[i:], o, &f.extra)
			return f, true
		}
	}
	if !h.has(kwOOM) {
		return failure{}, false
	}
	switch {
	case bHas(t, "oom-kill event") || bHas(t, "oom_kill event"):
		// slurmstepd: "Detected 1 oom-kill event(s) in StepId=2318.batch
		// cgroup." / "Detected 3 oom_kill events in StepId=881204.2."
		f := memFailure(KindHostOOM, "killed by Slurm's cgroup out-of-memory handler", "slurm")
		if v, ok := intAfterKey(t, "Detected "); ok {
			f.detail = "Slurm detected " + itoa(v) + " oom-kill event(s)"
			for _, k := range [...]string{"StepId=", "in step "} {
				if j := bIndex(t, k); j >= 0 {
					s := t[j+len(k):]
					e := 0
					for e < len(s) && s[e] != ' ' && !(s[e] == '.' && (e+1 == len(s) || s[e+1] == ' ')) {
						e++
					}
					f.detail += " in step " + string(s[:e])
					break
				}
			}
		}
		return f, true
	case bHas(t, "oom-kill:") || bHas(t, "invoked oom-killer") || bHas(t, "oom_reaper: reaped process"):
		f := memFailure(KindHostOOM, "killed by the kernel's out-of-memory killer", "kernel")
		if j := bIndex(t, "task="); j >= 0 {
			s := t[j+len("task="):]
			e := bytes.IndexByte(s, ',')
			if e < 0 {
				e = len(s)
			}
			if pid, ok := intAfterKey(t, ",pid="); ok {
				f.detail = "the kernel killed " + string(s[:e]) + " (pid " + itoa(pid) + ")"
			}
		} else if bHas(t, "oom_reaper") {
			f.detail = kernelKilled(t)
		}
		return f, true
	case bHas(t, "OOMKilled"):
		// Docker and Kubernetes: a container's "Reason: OOMKilled",
		// "command terminated with exit code 137 (OOMKilled)", a pod's
		// "reason": "OOMKilled". docker inspect's "OOMKilled": false is not.
		i := bIndex(t, "OOMKilled")
		r := bytes.TrimLeft(t[i+len("OOMKilled"):], "\"': =")
		if bHasPrefix(r, "false") || bHasPrefix(r, "False") {
			return failure{}, false
		}
		f := memFailure(KindHostOOM, "killed for memory (the container was OOMKilled)", "container")
		f.detail = clipText(string(trimSpace(t)), 200)
		return f, true
	case bHas(t, "OOM Killed") || bHas(t, "oom-killed") || bHas(t, "OOM-killed"):
		f := memFailure(KindHostOOM, "killed for memory (OOM killed)", "oom_killed")
		if indexFoldASCII(t, "slurm") >= 0 || bHas(t, "StepId=") {
			f.family = "slurm"
		}
		f.detail = clipText(string(trimSpace(t)), 200)
		return f, true
	}
	return failure{}, false
}

// killedLine handles lines with "killed" in any case.
func killedLine(t []byte) (failure, bool) {
	if i := bIndex(t, "killed by signal: "); i >= 0 {
		// DataLoader: "DataLoader worker (pid 23310) is killed by signal: Killed."
		sig := t[i+len("killed by signal: "):]
		worker := ""
		if j := bIndex(t, "(pid "); j >= 0 {
			if v, _, ok := scanInt(t[j+len("(pid "):]); ok {
				worker = "DataLoader worker pid " + itoa(v)
			}
		}
		switch {
		case bHasPrefix(sig, "Killed"):
			f := memFailure(KindHostOOM, "a DataLoader worker was killed by SIGKILL", "dataloader")
			f.detail = worker
			return f, true
		case bHasPrefix(sig, "Segmentation fault"):
			f := crashFailure(classSpecific, "segmentation fault in a DataLoader worker", "segfault")
			f.detail = worker
			return f, true
		case bHasPrefix(sig, "Bus error"):
			// A worker writes each batch into /dev/shm; a write past the end
			// of a full tmpfs is delivered as SIGBUS. The worker's own
			// "insufficient shared memory" line usually comes first.
			f := shmFailure("a DataLoader worker died of a bus error")
			f.lowConf = true
			f.detail = worker
			return f, true
		default:
			e := bytes.IndexAny(sig, ".")
			if e < 0 || e > 40 {
				e = len(sig)
				if e > 40 {
					e = 40
				}
			}
			f := crashFailure(classGeneric, "a DataLoader worker was killed by signal "+string(sig[:e]), "dataloader")
			f.detail = worker
			return f, true
		}
	}
	tt := trimSpace(t)
	tt = bytes.Trim(tt, "\"'`")
	if string(tt) == "Killed" || bytes.HasPrefix(tt, []byte("zsh: killed")) || jobKilled(tt) {
		f := memFailure(KindHostOOM, "killed by SIGKILL (the shell reports it)", "shell")
		f.detail = "the shell printed \"" + clipText(string(tt), 160) + "\""
		return f, true
	}
	// bash in a batch script: "slurm_script: line 41: 30517 Killed   python3 fit_model.py ..."
	for off := 0; off < len(t); {
		i := bIndex(t[off:], " Killed")
		if i < 0 {
			break
		}
		i += off
		off = i + len(" Killed")
		j := i
		for j > 0 && asciiDigit(t[j-1]) {
			j--
		}
		if j == i || (j > 0 && t[j-1] != ' ' && t[j-1] != ':') {
			continue
		}
		if off < len(t) && t[off] != ' ' && t[off] != '\t' {
			continue
		}
		f := memFailure(KindHostOOM, "killed by SIGKILL (the shell reports it)", "shell")
		cmd := trimSpace(t[off:])
		if len(cmd) > 120 {
			cmd = cmd[:120]
		}
		f.detail = "the shell reports pid " + string(t[j:i]) + " killed"
		if len(cmd) > 0 {
			f.detail += ": " + string(cmd)
		}
		return f, true
	}
	if i := bIndex(t, "Killed process "); i >= 0 {
		f := memFailure(KindHostOOM, "killed by the kernel's out-of-memory killer", "kernel")
		f.detail = kernelKilled(t)
		return f, true
	}
	return failure{}, false
}

// jobKilled recognises a shell's job-control notice for a background job
// killed by SIGKILL: zsh's "[1]  + killed     python train.py" and "[1]
// 31337 killed     python train.py" (zsh writes signal states in lower
// case, after the job's mark or pid) and bash's "[1]+
// Killed                  python train.py". The state is padded to a
// column, which prose ("[1] killed workers are ...") is not.
func jobKilled(tt []byte) bool {
	if len(tt) < 4 || tt[0] != '[' {
		return false
	}
	e := bytes.IndexByte(tt, ']')
	if e < 2 || e > 6 {
		return false
	}
	for _, c := range tt[1:e] {
		if !asciiDigit(c) {
			return false
		}
	}
	r := tt[e+1:]
	mark := false // the current (+) or previous (-) job
	if len(r) > 0 && (r[0] == '+' || r[0] == '-') {
		r, mark = r[1:], true
	}
	r = trimSpaceLeft(r)
	if len(r) > 0 && (r[0] == '+' || r[0] == '-') {
		r, mark = trimSpaceLeft(r[1:]), true
	}
	pid := false
	if _, n, ok := scanInt(r); ok && n > 0 && asciiDigit(r[0]) {
		r, pid = trimSpaceLeft(r[n:]), true // zsh prints the pid of a job it started
	}
	// Both shells pad the state to a column: "killed     cmd".
	switch {
	case (pid || mark) && bHasPrefix(r, "killed"):
		r = r[len("killed"):]
	case bHasPrefix(r, "Killed"):
		r = r[len("Killed"):]
	default:
		return false
	}
	return len(r) == 0 || bHasPrefix(r, "  ")
}

// localizedKilled lists the shell's "Killed" in other languages (glibc's
// translations of SIGKILL's name), for lines of their own.
var localizedKilled = map[string]bool{
	"已杀死": true, "已砍掉": true, "強制終了": true, "죽었음": true, "Getötet": true, "Processus arrêté": true,
	"Terminado (killed)": true, "Ucciso": true, "Morto": true, "Убито": true, "Убит": true, "Unicestwiony": true,
}

// isAnchoredKilled recognises a localized shell "Killed" on a line of its
// own: 已杀死 (zh_CN), 已砍掉 (zh_TW), 強制終了 (ja), 죽었음 (ko), Getötet
// (de), Processus arrêté (fr), Terminado (killed) (es), Ucciso (it), Morto
// (pt_BR), Убито / Убит (ru), Unicestwiony (pl).
func (c *Classifier) isAnchoredKilled(t []byte) bool {
	tt := bytes.Trim(trimSpace(t), "\"'`")
	if len(tt) == 0 || len(tt) > 48 {
		return false
	}
	return localizedKilled[string(tt)]
}

// exitFailure maps a worker's exit code as torchrun prints it (negative: the
// signal that ended it).
func exitFailure(code int64, family string) failure {
	switch {
	case code == -9 || code == 137:
		f := memFailure(KindHostOOM, "a worker was killed by SIGKILL", family)
		f.lowConf = true
		return f
	case code == -11 || code == 139:
		return crashFailure(classSpecific, "a worker crashed with a segmentation fault", "segfault")
	case code == -6 || code == 134:
		return crashFailure(classGeneric, "a worker aborted (SIGABRT)", family)
	case code == -7 || code == 135:
		return crashFailure(classSpecific, "a worker died of a bus error", "bus_error")
	case code < 0:
		return crashFailure(classGeneric, "a worker was killed by signal "+itoa(-code), family)
	case code > 0:
		return crashFailure(classGeneric, "a worker exited with code "+itoa(code), family)
	}
	return failure{kind: KindNone}
}

// exitLine handles exit codes and statuses printed by launchers, shells and
// IDEs.
func exitLine(t []byte) (failure, bool) {
	if i := bIndex(t, "exited unexpectedly"); i >= 0 {
		// DataLoader: "DataLoader worker (pid(s) 1234, 5678) exited unexpectedly"
		if v, ok := intAfterKey(t[i:], "with exit code "); ok {
			f := exitFailure(v, "dataloader")
			if f.kind == KindNone {
				return failure{}, false
			}
			f.reason = strings.Replace(f.reason, "a worker", "a DataLoader worker", 1)
			return f, true
		}
		f := memFailure(KindHostOOM, "a DataLoader worker exited unexpectedly", "dataloader")
		f.lowConf = true
		if j := bIndex(t, "(pid"); j >= 0 {
			if k := bytes.IndexByte(t[j:], ')'); k > 0 && k < 100 {
				f.detail = "DataLoader worker " + string(t[j+1:j+k])
			}
		}
		return f, true
	}
	if i := bIndex(t, "exits with return code = "); i >= 0 {
		// DeepSpeed's launcher: "[ERROR] [launch.py:322:sigkill_handler]
		// ['/usr/bin/python', '-u', 'train.py', '--local_rank=1'] exits
		// with return code = -9"
		code, _, ok := scanInt(t[i+len("exits with return code = "):])
		if !ok {
			return failure{}, false
		}
		f := exitFailure(code, "deepspeed")
		if f.kind == KindNone {
			return failure{}, false
		}
		f.detail = "DeepSpeed's launcher: a worker exited with return code " + itoa(code)
		if v, ok := intAfterKey(t, "--local_rank="); ok {
			f.detail = "DeepSpeed's launcher: local rank " + itoa(v) + " exited with return code " + itoa(code)
		}
		if code == -9 {
			f.detail += " (SIGKILL)"
		}
		return f, true
	}
	if i := bIndex(t, "exitcode"); i >= 0 {
		// torchrun: "failed (exitcode: -9) local_rank: 1 (pid: 20488) of binary: ..."
		r := t[i+len("exitcode"):]
		r = trimSpaceLeft(r)
		if len(r) > 0 && r[0] == ':' {
			r = trimSpaceLeft(r[1:])
			if code, _, ok := scanInt(r); ok {
				f := exitFailure(code, "torchrun")
				if f.kind == KindNone {
					return failure{}, false
				}
				if v, ok := intAfterKey(t, "local_rank: "); ok {
					f.detail = "torchrun: local rank " + itoa(v) + " exited with code " + itoa(code)
				}
				return f, true
			}
		}
		return failure{}, false
	}
	for _, k := range [...]string{"exit code ", "exit code: ", "exit status ", "exited with code ", "non-zero exit status "} {
		if v, ok := intAfterKey(t, k); ok {
			if v == 0 {
				return failure{}, false
			}
			f := exitFailure(v, "exit")
			if v == 137 {
				f.reason = "killed by SIGKILL (exit code 137)"
			}
			if f.kind == KindCrash {
				f.reason = "the process exited with code " + itoa(v)
				if v == 139 {
					f.reason = "segmentation fault (exit code 139)"
				}
			}
			return f, true
		}
	}
	return failure{}, false
}

// crashLine handles the known failures that are not memory.
func crashLine(t []byte, h *hitSet) (failure, bool) {
	switch {
	case h.has(kwIllegal):
		return crashFailure(classSpecific, "CUDA illegal memory access", "cuda_illegal_memory_access"), true
	case h.has(kwAssert):
		return crashFailure(classSpecific, "CUDA device-side assert", "cuda_device_side_assert"), true
	case h.has(kwKernelImage):
		return crashFailure(classSpecific, "no CUDA kernel image for this GPU", "cuda_no_kernel_image"), true
	case h.has(kwWatchdog) && bHas(t, "collective operation timeout"),
		h.has(kwPGNCCL) && (indexFoldASCII(t, "timeout") >= 0 || bHas(t, "timed out")):
		f := crashFailure(classSpecific, "NCCL timeout", "nccl_timeout")
		return f, true
	case h.has(kwSegfault) || h.has(kwSIGSEGV):
		return crashFailure(classSpecific, "segmentation fault", "segfault"), true
	case h.has(kwBusError) && (bHas(t, "Bus error") || bHas(t, "bus error encountered")):
		return crashFailure(classSpecific, "bus error", "bus_error"), true
	case h.has(kwNaN) && nanLoss(t):
		return crashFailure(classSpecific, "NaN loss", "nan_loss"), true
	}
	if h.has(kwCudaError) || h.has(kwHipError) {
		i := indexFoldASCII(t, "cuda error: ")
		n := len("cuda error: ")
		if i < 0 {
			i = bIndex(t, "HIP error: ")
			n = len("HIP error: ")
		}
		if i >= 0 {
			msg := trimSpace(t[i+n:])
			if len(msg) > 100 {
				msg = msg[:100]
			}
			return crashFailure(classSpecific, string(t[i:i+n])+string(msg), "cuda_error"), true
		}
	}
	if h.has(kwRuntimeErr) {
		if i := indexFoldASCII(t, "cuda runtime error ("); i >= 0 {
			msg := trimSpace(t[i:])
			if len(msg) > 100 {
				msg = msg[:100]
			}
			return crashFailure(classSpecific, string(msg), "cuda_error"), true
		}
	}
	if h.has(kwCudnn) && indexFoldASCII(t, "error") >= 0 {
		i := bIndex(t, "CUDNN_STATUS_")
		e := i + len("CUDNN_STATUS_")
		for e < len(t) && (t[e] == '_' || t[e] >= 'A' && t[e] <= 'Z') {
			e++
		}
		return crashFailure(classSpecific, "cuDNN error "+string(t[i:e]), "cudnn_error"), true
	}
	if h.has(kwCancelled) && bHas(t, "***") {
		switch {
		case bHas(t, "DUE TO TIME LIMIT"):
			return crashFailure(classSpecific, "cancelled by Slurm (time limit)", "slurm_cancelled"), true
		case bHas(t, "DUE TO PREEMPTION"):
			return crashFailure(classSpecific, "cancelled by Slurm (preemption)", "slurm_cancelled"), true
		case bHas(t, "DUE TO NODE FAILURE"):
			return crashFailure(classSpecific, "cancelled by Slurm (node failure)", "slurm_cancelled"), true
		}
		return crashFailure(classGeneric, "cancelled (Slurm)", "slurm_cancelled"), true
	}
	if h.has(kwCoreDumped) || h.has(kwAborted) && bHasPrefix(trimSpace(t), "Aborted") {
		tt := trimSpace(t)
		if len(tt) > 80 {
			tt = tt[:80]
		}
		return crashFailure(classGeneric, "crashed: "+string(tt), "abort"), true
	}
	return failure{}, false
}

// exceptionLine handles a Python exception line: "SomethingError: message"
// at the start of a line (after prefixes), after a glued progress bar ("]"),
// or after pytest's " - ".
func exceptionLine(t []byte) (failure, bool) {
	for off, tries := 0, 0; tries < 4 && off < len(t); tries++ {
		i, n := -1, 0
		ie := bIndex(t[off:], "Error")
		ix := bIndex(t[off:], "Exception")
		switch {
		case ie >= 0 && (ix < 0 || ie < ix):
			i, n = ie+off, len("Error")
		case ix >= 0:
			i, n = ix+off, len("Exception")
		default:
			return failure{}, false
		}
		end := i + n
		off = end
		if end < len(t) && t[end] != ':' {
			continue
		}
		name := identBefore(t, end)
		if len(name) <= n {
			continue // "Error:" alone is not a Python exception type
		}
		s := end - len(name)
		lead := trimSpace(t[:s])
		if len(lead) > 0 {
			last := lead[len(lead)-1]
			if !(last == ']' || last == '|' || last == '-' || last == '>' || last == '`' || last == '"') {
				continue
			}
		}
		msg := []byte(nil)
		if end < len(t) {
			msg = trimSpace(t[end+1:])
		}
		return exceptionFailure(name, msg), true
	}
	return failure{}, false
}

// exceptionFailure classifies a Python exception by its type and message.
func exceptionFailure(name string, msg []byte) failure {
	short := name
	if k := strings.LastIndexByte(name, '.'); k >= 0 {
		short = name[k+1:]
	}
	m := msg
	if len(m) > 100 {
		m = append(append([]byte(nil), m[:100]...), "…"...)
	}
	text := string(bytes.ToValidUTF8(m, []byte("\uFFFD")))
	quoted := short
	if text != "" {
		quoted += ": " + text
	}
	switch {
	case bHas(msg, "Cannot allocate memory") || bHas(msg, "[Errno 12]"):
		f := memFailure(KindCPUAllocOOM, "host memory allocation failed (ENOMEM)", "enomem")
		f.oom = &OOM{Format: "enomem", Exception: name}
		return f
	case short == "OutOfMemoryError" && strings.HasPrefix(name, "ray."):
		// Ray's OutOfMemoryError is host RAM: its memory monitor killed the
		// task (host_reporters.go reads the message when it is there).
		return memFailure(KindHostOOM, "killed for host memory by Ray's memory monitor (ray.exceptions.OutOfMemoryError)", "ray")
	case short == "OutOfMemoryError":
		f := memFailure(KindGPUOOM, "GPU out of memory", "torch")
		f.oom = &OOM{Format: "other", Exception: name}
		return f
	case short == "ResourceExhaustedError":
		// TensorFlow 2.1x: "ResourceExhaustedError: Graph execution
		// error:" (the "Detected at node" block and the OOM line follow),
		// Keras 3's "ResourceExhaustedError: Exception encountered when
		// calling ...". The OOM line further on replaces it.
		f := memFailure(KindGPUOOM, "GPU out of memory (TensorFlow ResourceExhaustedError)", "tf")
		f.oom = &OOM{Format: fmtTFResource, Exception: name}
		f.exc = name
		return f
	case short == "ImportError":
		return crashFailure(classSpecific, "import error: "+text, "import_error")
	case short == "ModuleNotFoundError":
		return crashFailure(classSpecific, "module not found: "+text, "module_not_found")
	case short == "FileNotFoundError":
		what := "file not found"
		lm := bytes.ToLower(msg)
		for _, s := range [...]string{".pt'", ".pth'", ".ckpt'", ".bin'", ".safetensors'", "checkpoint", "ckpt"} {
			if bytes.Contains(lm, []byte(s)) {
				what = "checkpoint file not found"
				break
			}
		}
		if i := bIndex(m, "No such file or directory: "); i >= 0 {
			text = string(bytes.ToValidUTF8(m[i+len("No such file or directory: "):], []byte("\uFFFD")))
		}
		return crashFailure(classSpecific, what+": "+text, "file_not_found")
	case short == "FloatingPointError":
		return crashFailure(classSpecific, "NaN or infinite loss ("+quoted+")", "nan_loss")
	case short == "ChildFailedError":
		return crashFailure(classWrapper, "a torchrun worker failed", "torchrun")
	case short == "DistBackendError" || bHas(msg, "NCCL error") || bHas(msg, "NCCL communicator"):
		return crashFailure(classSpecific, "NCCL error ("+quoted+")", "nccl_error")
	}
	f := crashFailure(classGeneric, quoted, "exception")
	f.exc = name
	return f
}

// autoBatchLine tracks YOLOv5/Ultralytics AutoBatch, whose probing prints
// CUDA OOM text for batch sizes that do not fit; that text is not a failure.
func (c *Classifier) autoBatchLine(t []byte) {
	switch {
	case bHas(t, "AutoBatch: Computing optimal batch size"):
		c.abUntil = c.num + 40
	case bHas(t, "AutoBatch: Using batch-size"), bHas(t, "AutoBatch: WARNING"):
		c.abUntil = c.num
	}
}

// expandableLine notes what the log says about expandable_segments, outside
// PyTorch's own hint in OOM messages.
func (c *Classifier) expandableLine(t []byte) {
	switch {
	case bHas(t, "expandable_segments not supported"):
		c.exp.unsupported = true
	case bHas(t, "try setting") || bHas(t, "If reserved"):
		// the OOM message's hint
	case bHas(t, "expandable_segments:True") || bHas(t, "expandable_segments:true"):
		c.exp.on = true
	case bHas(t, "expandable_segments:False") || bHas(t, "expandable_segments:false"):
		c.exp.off = true
	}
}

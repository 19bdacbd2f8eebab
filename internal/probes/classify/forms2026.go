package classify

// Out-of-memory forms that are not a PyTorch exception: serving and RL
// engines that refuse to start (vLLM, SGLang, TGI), Intel's Level Zero and
// SYCL run-times, the CUDA driver API, TensorFlow's eager "failed to allocate
// memory", and a compiler killed while building an extension at start-up.
// Each template comes from the program's own source; docs/classifier.md lists
// them with an example each.

import (
	"bytes"
	"math"
	"strconv"
)

// Formats (OOM.Format) of the forms in this file. They are a contract:
// `gpuguard explain --json` prints them.
const (
	fmtVLLMKVCache     = "vllm_kv_cache"            // the KV cache cannot hold one request of max_model_len
	fmtVLLMNoBlocks    = "vllm_no_cache_blocks"     // no memory left for any KV cache block
	fmtVLLMFreeMemory  = "vllm_startup_free_memory" // less free than gpu_memory_utilization asks for
	fmtVLLMWarmup      = "vllm_warmup"              // the sampler's or pooler's warm-up with max_num_seqs requests
	fmtSGLangMem       = "sglang_mem_fraction"      // SGLang's static pool leaves no KV cache
	fmtTGIPrefill      = "tgi_prefill"              // TGI's warm-up batch does not fit
	fmtLevelZero       = "level_zero_out_of_device_memory"
	fmtSYCLResources   = "sycl_out_of_resources"
	fmtCUDADriver      = "cuda_driver_out_of_memory"
	fmtAccelerator     = "accelerator_error"     // torch >= 2.8's torch.AcceleratorError
	fmtTFResource      = "tf_resource_exhausted" // a ResourceExhaustedError whose message names no tensor
	fmtTFFailedAlloc   = "tf_failed_to_allocate" // TF 2.1x eager: "{{function_node ...}} failed to allocate memory"
	fmtHostOutOfMemory = "level_zero_out_of_host_memory"
)

// engineFormat says whether an OOM format is a serving engine's refusal to
// start: its remedy is the engine's own settings, never a training batch.
func engineFormat(f string) bool {
	switch f {
	case fmtVLLMKVCache, fmtVLLMNoBlocks, fmtVLLMFreeMemory, fmtVLLMWarmup, fmtSGLangMem, fmtTGIPrefill:
		return true
	}
	return false
}

// engineFailure starts a gpu_oom of a serving engine.
func engineFailure(t []byte, at int, format, reason string) (failure, *OOM) {
	f, o := gpuOOM(t, at, format)
	f.reason = reason
	f.family = format
	if r := engineRank(t); r >= 0 {
		f.rank = r
	}
	return f, o
}

// engineLine recognises serving and RL engines that refuse to start because
// the device memory left after the weights cannot hold their cache:
//
//   - vLLM V1 (vllm/v1/core/kv_cache_utils.py): "To serve at least one
//     request with the model's max seq len (40960), (5.62 GiB KV cache is
//     needed, which is larger than the available KV cache memory (4.50
//     GiB). Based on the available memory, the estimated maximum model
//     length is 32768. Try increasing `gpu_memory_utilization` or decreasing
//     `max_model_len` when initializing the engine.";
//   - vLLM V0: "The model's max seq len (32768) is larger than the maximum
//     number of tokens that can be stored in KV cache (21264). Try ...";
//   - vLLM: "No available memory for the cache blocks. Try increasing
//     `gpu_memory_utilization` when initializing the engine.";
//   - vLLM: "Free memory on device cuda:0 (12.18/23.56 GiB) on startup is
//     less than desired GPU memory utilization (0.92, 21.67 GiB). Decrease
//     GPU memory utilization or reduce GPU memory used by other processes.";
//   - SGLang: "Not enough memory. Please try to increase
//     --mem-fraction-static." (and " Current value: mem_fraction_static=X");
//   - TGI's warm-up: "Not enough memory to handle 4096 prefill tokens. You
//     need to decrease `--max-batch-prefill-tokens`", as the shard raises it
//     and as the router and the launcher pass it on.
//
// A line that only mentions the settings (a config dump with
// gpu_memory_utilization=0.9, vLLM's "Available KV cache memory: 9.53 GiB")
// is not one. The figures the message carries are kept: the KV cache needed
// as the request, the KV cache available as free, the desired and free
// memory of the start-up check with the device's total.
func engineLine(t []byte, h *hitSet) (failure, bool) {
	if h.has(kwKVCache) {
		if i := bIndex(t, " KV cache is needed"); i >= 0 {
			at := max(bIndex(t, "To serve"), 0)
			if at > i {
				at = 0
			}
			f, o := engineFailure(t, at, fmtVLLMKVCache, "GPU out of memory for vLLM's KV cache (max_model_len does not fit)")
			if v, _, ok := memSizeBefore(t, i); ok {
				o.RequestedBytes = valPtr(v)
			}
			if v, ok := memSizeAfter(t, "available KV cache memory ("); ok {
				o.FreeBytes = valPtr(v)
			}
			f.detail = vllmLenWords(t)
			return f, true
		}
		if i := bIndex(t, "tokens that can be stored in KV cache"); i >= 0 {
			at := max(bIndex(t, "The model's max seq len"), 0)
			f, _ := engineFailure(t, at, fmtVLLMKVCache, "GPU out of memory for vLLM's KV cache (max_model_len does not fit)")
			if n, ok := intAfterKey(t[i:], "KV cache ("); ok {
				f.detail = "the KV cache holds " + itoa(n) + " tokens"
				if m, ok := intAfterKey(t, "max seq len ("); ok {
					f.detail = "the model's max seq len is " + itoa(m) + " tokens and " + f.detail
				}
			}
			return f, true
		}
	}
	if h.has(kwCacheBlocks) {
		if i := bIndex(t, "No available memory for the cache blocks"); i >= 0 {
			f, _ := engineFailure(t, i, fmtVLLMNoBlocks, "GPU out of memory for vLLM's KV cache (no cache blocks)")
			return f, true
		}
	}
	if h.has(kwDesiredGPU) {
		if i := bIndex(t, "Free memory on device"); i >= 0 && bHas(t[i:], "less than desired GPU memory utilization") {
			f, o := engineFailure(t, i, fmtVLLMFreeMemory, "not enough free GPU memory for vLLM's gpu_memory_utilization")
			r := t[i+len("Free memory on device"):]
			if j := bytes.IndexByte(r, '('); j >= 0 {
				if d := trimSpace(r[:j]); len(d) > 0 && len(d) <= 24 {
					o.Device = valPtr(string(d))
				}
				// "(12.18/23.56 GiB)": free/total in the unit printed last.
				if free, total, ok := slashSizes(r[j+1:]); ok {
					o.FreeBytes, o.TotalBytes = valPtr(free), valPtr(total)
				}
			}
			if j := bIndex(t, "GPU memory utilization ("); j >= 0 {
				u := t[j+len("GPU memory utilization ("):]
				if k := bIndex(u, ", "); k > 0 && k < 12 {
					if v, _, ok := parseMemSize(u[k+2:]); ok {
						o.RequestedBytes = valPtr(v)
					}
					f.detail = "the engine was set to use gpu_memory_utilization=" + string(u[:k]) + " of the GPU"
				}
			}
			return f, true
		}
	}
	if h.has(kwNotEnough) {
		i := bIndex(t, "Not enough memory")
		if i < 0 {
			return failure{}, false
		}
		r := t[i+len("Not enough memory"):]
		switch {
		case bHasPrefix(r, ". Please try to increase --mem-fraction-static"):
			f, _ := engineFailure(t, i, fmtSGLangMem, "GPU out of memory for SGLang's KV cache pool (mem-fraction-static)")
			if j := bIndex(r, "mem_fraction_static="); j >= 0 {
				v := r[j+len("mem_fraction_static="):]
				e := 0
				for e < len(v) && (asciiDigit(v[e]) || v[e] == '.') && e < 12 {
					e++
				}
				if e > 0 {
					f.detail = "--mem-fraction-static was " + string(bytes.TrimRight(v[:e], "."))
				}
			}
			return f, true
		case bHasPrefix(r, " to handle "):
			n, _, ok := scanInt(r[len(" to handle "):])
			if !ok || !bHas(r, " prefill tokens") {
				return failure{}, false
			}
			f, _ := engineFailure(t, i, fmtTGIPrefill, "GPU out of memory in TGI's warm-up (prefill tokens)")
			f.detail = "TGI's warm-up could not run a batch of " + itoa(n) + " prefill tokens (--max-batch-prefill-tokens)"
			return f, true
		}
	}
	return failure{}, false
}

// engineRelabel makes the PyTorch OOM an engine caught, just before its
// own message f, the engine's: TGI's warm-up and vLLM's sampler warm-up
// raise their message "from" the OutOfMemoryError, whose figures stay; the
// format, the reason and so the remedy become the engine's.
func (c *Classifier) engineRelabel(f *failure) {
	cur := c.cur
	if cur == nil || cur.kind != KindGPUOOM || cur.oom == nil || engineFormat(cur.oom.Format) || c.num-cur.lastLine > 30 ||
		f.rank >= 0 && cur.rank >= 0 && f.rank != cur.rank {
		return
	}
	cur.oom.Format, cur.reason, cur.family = f.oom.Format, f.reason, f.family
	addDetail(&cur.detail, f.detail)
}

// vllmWarmupLine reads vLLM's "CUDA out of memory occurred when warming up
// sampler with 256 dummy requests. Please try lowering `max_num_seqs` or
// `gpu_memory_utilization` when initializing the engine." (also "warming up
// pooler (task=...)").
func vllmWarmupLine(t []byte) (failure, bool) {
	i := bIndex(t, "out of memory occurred when warming up ")
	if i < 0 {
		return failure{}, false
	}
	at := i
	if j := bytes.LastIndexByte(t[:i], ' '); j >= 0 && i-j <= 6 {
		at = j + 1 // "CUDA out of memory ..."
	} else if i > 0 && i <= 5 {
		at = 0
	}
	f, _ := engineFailure(t, at, fmtVLLMWarmup, "GPU out of memory in vLLM's warm-up (max_num_seqs dummy requests)")
	r := t[i+len("out of memory occurred when warming up "):]
	what := wordAfter(r, "")
	if n, ok := intAfterKey(r, "with "); ok {
		f.detail = "vLLM's warm-up of the " + what + " with " + itoa(n) + " dummy requests (max_num_seqs) ran out of memory"
	}
	return f, true
}

// vllmLenWords states the token counts of vLLM V1's KV cache message: the
// model's max seq len and the longest that fits.
func vllmLenWords(t []byte) string {
	s := ""
	if m, ok := intAfterKey(t, "max seq len ("); ok {
		s = "one request of the model's max seq len (" + itoa(m) + " tokens) needs more KV cache than is available"
	}
	if e, ok := intAfterKey(t, "maximum model length is "); ok {
		if s != "" {
			s += "; "
		}
		s += "vLLM estimates that " + itoa(e) + " tokens would fit"
	}
	return s
}

// slashSizes reads "12.18/23.56 GiB": two numbers and the unit after the
// second, which applies to both.
func slashSizes(b []byte) (a, c int64, ok bool) {
	k := bytes.IndexByte(b, '/')
	if k <= 0 || k > 16 {
		return 0, 0, false
	}
	x, err := strconv.ParseFloat(string(trimSpace(b[:k])), 64)
	if err != nil || x < 0 {
		return 0, 0, false
	}
	c, _, ok = parseMemSize(b[k+1:])
	if !ok {
		return 0, 0, false
	}
	u := k + 1
	for u < len(b) && (asciiDigit(b[u]) || b[u] == '.') {
		u++
	}
	if u < len(b) && b[u] == ' ' {
		u++
	}
	m, _ := memUnitMult(b[u:])
	if m == 0 || x*float64(m) > math.MaxInt64/2 {
		return 0, 0, false
	}
	return int64(math.Round(x * float64(m))), c, true
}

// engineRank reads the rank a serving engine's log prefix names: vLLM's
// "(VllmWorker rank=1 pid=2231)", "(Worker_TP1 pid=...)" and "(VllmWorker
// TP1 pid=...)", SGLang's "[2026-03-02 11:02:44 TP3]" (also "DP0 TP3").
// It returns -1 when the line has no such prefix.
func engineRank(t []byte) int {
	tl := trimSpaceLeft(t)
	if len(tl) < 4 || tl[0] != '(' && tl[0] != '[' {
		return -1
	}
	closer := byte(')')
	if tl[0] == '[' {
		closer = ']'
	}
	e := bytes.IndexByte(tl, closer)
	if e < 0 || e > 96 {
		return -1
	}
	g := tl[1:e]
	if i := bIndex(g, "rank="); i >= 0 {
		if v, _, ok := scanInt(g[i+len("rank="):]); ok && v >= 0 {
			return int(v)
		}
	}
	for off := 0; off < len(g); {
		i := bIndex(g[off:], "TP")
		if i < 0 {
			break
		}
		i += off
		off = i + 2
		if i > 0 && g[i-1] != ' ' && g[i-1] != '_' && g[i-1] != '(' {
			continue
		}
		if off < len(g) && asciiDigit(g[off]) {
			if v, n, ok := scanInt(g[off:]); ok && (off+n == len(g) || g[off+n] == ' ' || g[off+n] == '_') {
				return int(v)
			}
		}
	}
	return -1
}

// outOfLine recognises the run-times' own out-of-memory status codes:
// Level Zero's and the Unified Runtime's UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
// and ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (Intel XPU: "RuntimeError:
// level_zero backend failed with error: 39
// (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)"), older SYCL's
// PI_ERROR_OUT_OF_RESOURCES ("Native API failed. Native API returns: -5
// (PI_ERROR_OUT_OF_RESOURCES)"), the CUDA driver API's
// CUDA_ERROR_OUT_OF_MEMORY, and the OUT_OF_HOST_MEMORY codes (host memory).
// The code must be reported as an error or a failure on its line: a header
// that defines it ("#define ..._OUT_OF_DEVICE_MEMORY 39") is not one.
func outOfLine(t []byte) (failure, bool) {
	i := bIndex(t, "OUT_OF_")
	if i < 0 {
		return failure{}, false
	}
	s := i
	for s > 0 && (t[s-1] == '_' || t[s-1] >= 'A' && t[s-1] <= 'Z') {
		s--
	}
	e := i + len("OUT_OF_")
	for e < len(t) && (t[e] == '_' || t[e] >= 'A' && t[e] <= 'Z') {
		e++
	}
	code := string(t[s:e])
	tt := trimSpace(t)
	if bHasPrefix(tt, "#define") || bHasPrefix(tt, "case ") || bHasPrefix(tt, "CASE(") || bHasPrefix(tt, "//") {
		return failure{}, false
	}
	if !errorWords(t[:s]) && !errorWords(t[e:]) {
		return failure{}, false
	}
	switch {
	case code == "UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY" || code == "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY":
		f, _ := gpuOOM(t, s, fmtLevelZero)
		f.reason = "XPU out of memory (" + code + ")"
		f.family = "xpu"
		return f, true
	case code == "PI_ERROR_OUT_OF_RESOURCES":
		f, _ := gpuOOM(t, s, fmtSYCLResources)
		f.reason = "XPU out of memory (SYCL " + code + ")"
		f.family = "xpu"
		return f, true
	case code == "CUDA_ERROR_OUT_OF_MEMORY":
		f, _ := gpuOOM(t, s, fmtCUDADriver)
		f.reason = "CUDA out of memory (driver API " + code + ")"
		f.family = "cuda_driver"
		return f, true
	case code == "UR_RESULT_ERROR_OUT_OF_HOST_MEMORY" || code == "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY" || code == "PI_ERROR_OUT_OF_HOST_MEMORY":
		f := memFailure(KindCPUAllocOOM, "host memory allocation failed ("+code+")", "xpu")
		f.oom = &OOM{Format: fmtHostOutOfMemory, Exception: exceptionBefore(t, s)}
		f.detail = "the XPU run-time could not allocate host memory (" + code + ")"
		return f, true
	}
	return failure{}, false
}

// errorWords says whether b reports an error or a failure.
func errorWords(b []byte) bool {
	return bHas(b, "rror") || bHas(b, "ERROR") || bHas(b, "failed") || bHas(b, "Returning") || bHas(b, "returned") || bHas(b, "FAIL")
}

// buildFamily is the family of a compiler killed while building an
// extension: Verdict.Build is set from it.
const buildFamily = "build"

// buildKilledLine recognises a compiler killed by SIGKILL while building a
// C++/CUDA extension (torch.utils.cpp_extension, DeepSpeed's op builder,
// flash-attn, a pip install at start-up): almost always the out-of-memory
// killer, because ninja starts one compiler per CPU and each can take
// several GiB. GCC prints "g++: fatal error: Killed signal terminated
// program cc1plus" (older releases "c++: internal compiler error: Killed
// (program cc1plus)"); nvcc prints "nvcc error   : 'cicc' died due to
// signal 9 (Kill signal)" (also 'cudafe++', 'ptxas'). The remedy is fewer
// parallel build jobs (MAX_JOBS), not a smaller batch.
func buildKilledLine(t []byte) (failure, bool) {
	prog := ""
	switch {
	case bHas(t, "fatal error: Killed signal terminated program "):
		prog = wordAfter(t, "Killed signal terminated program ")
	case bHas(t, "internal compiler error: Killed (program "):
		prog = wordAfter(t, "internal compiler error: Killed (program ")
		if e := len(prog); e > 0 && prog[e-1] == ')' {
			prog = prog[:e-1]
		}
	case bHas(t, "died due to signal 9"):
		i := bIndex(t, "died due to signal 9")
		q := bytes.LastIndexByte(t[:i], '\'')
		if q <= 0 {
			return failure{}, false
		}
		p := bytes.LastIndexByte(t[:q], '\'')
		if p < 0 || q-p > 64 || !bHas(t[:p], "nvcc") && !bHas(t[:p], "error") {
			return failure{}, false
		}
		prog = string(t[p+1 : q])
		if k := bytes.LastIndexByte([]byte(prog), '/'); k >= 0 {
			prog = prog[k+1:]
		}
		prog = string(bytes.Trim([]byte(prog), "\""))
	default:
		return failure{}, false
	}
	if !compilerProgram(prog) {
		return failure{}, false
	}
	f := memFailure(KindHostOOM, "a compiler was killed while building an extension ("+prog+", SIGKILL)", buildFamily)
	f.detail = "the compiler " + prog + " was killed by SIGKILL while a C++/CUDA extension was being built; the out-of-memory killer picks the largest processes, and at start-up those are the compilers ninja runs in parallel (one per CPU unless MAX_JOBS says otherwise)"
	return f, true
}

// compilerProgram says whether name is one of the programs a compiler
// driver runs (GCC's cc1/cc1plus/as/ld, nvcc's cicc/cudafe++/ptxas/nvlink/
// fatbinary, clang).
func compilerProgram(name string) bool {
	for _, p := range [...]string{"cc1", "cicc", "cudafe", "ptxas", "nvlink", "fatbinary", "clang", "lto", "collect2", "ld", "as"} {
		if name == p || len(name) > len(p) && name[:len(p)] == p && (p == "cc1" || p == "cudafe" || p == "clang" || p == "lto" || p == "ld") {
			return true
		}
	}
	return false
}

// wordAfter is the run of non-space bytes after key in t.
func wordAfter(t []byte, key string) string {
	i := bIndex(t, key)
	if i < 0 {
		return ""
	}
	r := t[i+len(key):]
	e := 0
	for e < len(r) && r[e] != ' ' && r[e] != '\t' && e < 48 {
		e++
	}
	return string(bytes.TrimRight(r[:e], ".,;:"))
}

// asBuild makes cur, a host OOM the shell or a launcher reported just
// before, the compiler's: the bare "Killed" that make or ninja passes on
// comes before GCC's own line.
func asBuild(cur *failure, f *failure) {
	cur.family, cur.reason, cur.lowConf = buildFamily, f.reason, false
	cur.detail = f.detail
}

// tfHead says whether cur is TensorFlow's exception line without figures
// ("ResourceExhaustedError: Graph execution error:"), which the OOM line of
// the same report, further on, replaces.
func tfHead(cur *failure, num, rank int) bool {
	return cur != nil && cur.oom != nil && cur.oom.Format == fmtTFResource && num-cur.line <= 400 &&
		(rank < 0 || cur.rank < 0 || rank == cur.rank)
}

// tfFailedAlloc reads TensorFlow 2.1x's eager allocation failure:
// "ResourceExhaustedError: {{function_node
// __wrapped__Mul_device_/job:localhost/replica:0/task:0/device:GPU:0}} failed
// to allocate memory [Op:Mul]". It names the device, no size.
func tfFailedAlloc(t []byte) (failure, bool) {
	i := bIndex(t, "failed to allocate memory")
	if i < 0 || !bHas(t[:i], "{{function_node") && !bHas(t[:i], "ResourceExhaustedError") {
		return failure{}, false
	}
	at := max(bIndex(t, "{{function_node"), 0)
	if at == 0 {
		at = i
	}
	f, o := gpuOOM(t, at, fmtTFFailedAlloc)
	f.reason = "GPU out of memory (TensorFlow)"
	f.family = "tf"
	if j := bIndex(t[:i], "/device:"); j >= 0 {
		d := t[j+1 : i]
		e := 0
		for e < len(d) && d[e] != '}' && d[e] != ' ' {
			e++
		}
		o.Device = valPtr(string(d[:e]))
	}
	if j := bIndex(t[i:], "[Op:"); j >= 0 {
		if k := bytes.IndexByte(t[i+j:], ']'); k > 0 && k < 80 {
			f.detail = "TensorFlow op " + string(t[i+j+len("[Op:"):i+j+k]) + " could not allocate its output"
		}
	}
	return f, true
}

// engineWords are the sentences the diagnosis adds for the forms of this
// file: what the engine's message says in figures.
func engineWords(v *Verdict, f *failure) []string {
	o := v.OOM
	if o == nil {
		return nil
	}
	var d []string
	switch o.Format {
	case fmtVLLMKVCache:
		s := "vLLM could not reserve the KV cache for one request of max_model_len tokens"
		if o.RequestedBytes != nil && o.FreeBytes != nil {
			s += ": the request is that KV cache, the free memory what gpu_memory_utilization left for it after the weights and the activations"
		}
		d = append(d, s+".")
	case fmtVLLMNoBlocks:
		d = append(d, "The weights and the activations of vLLM's profiling run left no memory within gpu_memory_utilization for a single KV cache block.")
	case fmtVLLMFreeMemory:
		s := "vLLM checks at start-up that the share of the GPU it is to use (the request) is free"
		if o.RequestedBytes != nil && o.FreeBytes != nil && o.TotalBytes != nil {
			s += "; " + sizeWords(*o.TotalBytes-*o.FreeBytes) + " of the device was already in use by something else (another process, an earlier engine or the trainer on the same GPU)"
		}
		d = append(d, s+".")
	case fmtVLLMWarmup:
		d = append(d, "vLLM warms up its sampler (or pooler) with max_num_seqs requests at once after sizing the KV cache; what gpu_memory_utilization left outside the KV cache did not hold their activations.")
	case fmtSGLangMem:
		d = append(d, "SGLang's static memory pool (--mem-fraction-static of the GPU, for the weights and the KV cache) left no room for the KV cache after the weights.")
	case fmtTGIPrefill:
		d = append(d, "TGI runs one batch of --max-batch-prefill-tokens tokens at warm-up to size its KV cache; that batch did not fit.")
	case fmtLevelZero, fmtSYCLResources:
		d = append(d, "The Intel GPU run-time (Level Zero / SYCL) could not allocate device memory; PyTorch's XPU allocator passes the code on without figures.")
	case fmtAccelerator:
		d = append(d, "PyTorch 2.8 and later raise torch.AcceleratorError for a CUDA or HIP call that failed outside the caching allocator (a library's workspace, a context, a kernel's launch), so the message has no figures.")
	}
	if f != nil && f.detail != "" && (engineFormat(o.Format) || o.Format == fmtTFFailedAlloc) {
		d = append(d, sentence(f.detail))
	}
	return d
}

// engineAdvice is the advice for a serving engine that refused to start, in
// place of a batch size: its own settings. ok is false for other formats.
func engineAdvice(o *OOM) (sug []string, ok bool) {
	if o == nil || !engineFormat(o.Format) {
		return nil, false
	}
	switch o.Format {
	case fmtVLLMKVCache:
		sug = append(sug, "Lower max_model_len (--max-model-len) to what fits (vLLM's message estimates it), or raise gpu_memory_utilization if nothing else uses the GPU; a quantized KV cache (kv_cache_dtype=fp8) or more GPUs (tensor_parallel_size) make room too.")
	case fmtVLLMNoBlocks:
		sug = append(sug, "Raise gpu_memory_utilization if nothing else uses the GPU, lower max_num_seqs and max_num_batched_tokens (the profiling run's activations), or use more GPUs (tensor_parallel_size) or a quantized model: the weights alone nearly fill the share vLLM may use.")
	case fmtVLLMFreeMemory:
		sug = append(sug, "Lower gpu_memory_utilization below the free share of the GPU, or free the GPU first (nvidia-smi shows who holds it; in an RL job, the trainer's own memory on the same GPU counts).")
	case fmtVLLMWarmup:
		sug = append(sug, "Lower max_num_seqs (the warm-up runs that many requests at once) or gpu_memory_utilization (which leaves more memory outside the KV cache for activations), as vLLM's message says.")
	case fmtSGLangMem:
		sug = append(sug, "Raise --mem-fraction-static (by 0.05 to 0.1) if nothing else uses the GPU, or lower --context-length and --max-running-requests, or use more GPUs (--tp) or a quantized model.")
	case fmtTGIPrefill:
		sug = append(sug, "Lower --max-batch-prefill-tokens (and --max-input-tokens / --max-total-tokens with it), or use more GPUs (--num-shard) or a quantized model.")
	}
	sug = append(sug, "This is the engine's start-up sizing, not a training batch: retrying unchanged fails the same way.")
	return sug, true
}

// buildAdvice is the advice for a compiler killed while building an
// extension.
func buildAdvice() []string {
	return []string{
		"Build with fewer parallel jobs: set MAX_JOBS (read by torch.utils.cpp_extension, DeepSpeed's op builder and flash-attn's setup) to 2, or 1 on a small machine; NVCC_THREADS=1 keeps nvcc from forking more. A smaller batch is not the remedy: the job had not started training.",
		"Or build the extension once ahead of time (a prebuilt wheel, DS_BUILD_OPS=1 at install) on a machine with more RAM, so the job does not compile at start-up.",
	}
}

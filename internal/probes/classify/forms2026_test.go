package classify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// oomWant is what a case asserts about the OOM's figures: a field left at
// -1 (or "") must be absent from the verdict, so a parser that invents a
// figure fails as surely as one that loses it.
type oomWant struct {
	format               string
	exception            string
	requested, free, tot int64
	device               string
}

func (w oomWant) check(t *testing.T, v Verdict) {
	t.Helper()
	o := v.OOM
	if o == nil {
		t.Fatalf("no OOM figures, want format %q", w.format)
	}
	if o.Format != w.format {
		t.Errorf("format %q, want %q", o.Format, w.format)
	}
	if w.exception != "" && o.Exception != w.exception {
		t.Errorf("exception %q, want %q", o.Exception, w.exception)
	}
	for _, f := range []struct {
		what string
		got  *int64
		want int64
	}{{"requested", o.RequestedBytes, w.requested}, {"free", o.FreeBytes, w.free}, {"total", o.TotalBytes, w.tot}} {
		switch {
		case f.want < 0 && f.got != nil:
			t.Errorf("%s = %d, want none", f.what, *f.got)
		case f.want >= 0:
			wantBytes(t, f.what, f.got, f.want)
		}
	}
	switch {
	case w.device == "" && o.Device != nil:
		t.Errorf("device %q, want none", *o.Device)
	case w.device != "" && (o.Device == nil || *o.Device != w.device):
		t.Errorf("device %s, want %q", fmtPtr(o.Device), w.device)
	}
}

// says checks that the diagnosis holds every phrase of want, and the
// suggestions every phrase of sug and none of not.
func says(t *testing.T, v Verdict, want, sug, not []string) {
	t.Helper()
	s := strings.Join(v.Suggestions, " ")
	for _, w := range want {
		if !strings.Contains(v.Diagnosis, w) {
			t.Errorf("diagnosis lacks %q: %q", w, v.Diagnosis)
		}
	}
	for _, w := range sug {
		if !strings.Contains(s, w) {
			t.Errorf("suggestions lack %q: %q", w, s)
		}
	}
	for _, w := range not {
		if strings.Contains(s, w) {
			t.Errorf("suggestions hold %q: %q", w, s)
		}
	}
}

// noBatch: a serving engine's start-up and a build are not helped by a
// smaller training batch, and the advice must not say so.
var noBatch = []string{"Lower the training batch size", "Lower the batch size"}

func TestServingEngineForms(t *testing.T) {
	const kvV1 = "ValueError: To serve at least one request with the model's max seq len (65536), (10.00 GiB KV cache is needed, which is larger than the available KV cache memory (6.21 GiB). Based on the available memory, the estimated maximum model length is 40672. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
	vllmKV := func(req, free int64, words ...string) func(t *testing.T, v Verdict) {
		return func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_kv_cache", exception: "ValueError", requested: req, free: free, tot: -1}.check(t, v)
			says(t, v, words, []string{"max_model_len", "gpu_memory_utilization"}, noBatch)
		}
	}
	runCases(t, []classifyCase{
		{name: "vLLM V1 KV cache", log: kvV1, kind: KindGPUOOM, rank: -1, reason: "vLLM's KV cache",
			check: vllmKV(10*gib, rnd(6.21*gib), "It asked for 10.00 GiB, which had 6.21 GiB free", "max seq len (65536 tokens)", "40672 tokens would fit")},
		{name: "vLLM V1 KV cache behind the engine core's prefix", log: "(EngineCore_DP0 pid=3402) ERROR 11-02 09:14:07 [core.py:712] " + kvV1,
			kind: KindGPUOOM, rank: -1, check: vllmKV(10*gib, rnd(6.21*gib))},
		{name: "vLLM V1 KV cache from a worker with its rank", log: "(VllmWorker rank=3 pid=2231) ERROR 11-02 09:14:07 [multiproc_executor.py:470] " + kvV1,
			kind: KindGPUOOM, rank: 3, check: vllmKV(10*gib, rnd(6.21*gib))},
		{name: "vLLM V1 KV cache, newer worker names", log: "(Worker_TP1 pid=771) ERROR 11-02 09:14:07 [multiproc_executor.py:671] " + kvV1,
			kind: KindGPUOOM, rank: 1, check: vllmKV(10*gib, rnd(6.21*gib))},
		{name: "vLLM V1 KV cache hard-wrapped", log: "ValueError:\nTo serve at least one request with the models's max seq len (131072),\n(18.00 GiB KV cache is needed, which is larger than the available KV cache memory (3.90 GiB).\nBased on the available memory, the estimated maximum model length is 28384.\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				vllmKV(18*gib, rnd(3.90*gib))(t, v)
				if v.Line != 3 {
					t.Errorf("line %d, want the KV cache line (3)", v.Line)
				}
			}},
		{name: "vLLM V0 max seq len", log: "[rank0]: ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (21264). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n",
			kind: KindGPUOOM, rank: 0, check: vllmKV(-1, -1, "max seq len is 32768 tokens and the KV cache holds 21264 tokens")},
		{name: "vLLM no cache blocks", log: "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n",
			kind: KindGPUOOM, rank: -1, reason: "no cache blocks", check: func(t *testing.T, v Verdict) {
				oomWant{format: "vllm_no_cache_blocks", exception: "ValueError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"single KV cache block"}, []string{"Raise gpu_memory_utilization", "max_num_seqs"}, noBatch)
			}},
		{name: "vLLM free memory at start-up", log: "ValueError: Free memory on device cuda:0 (12.18/23.56 GiB) on startup is less than desired GPU memory utilization (0.92, 21.67 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n",
			kind: KindGPUOOM, rank: -1, reason: "gpu_memory_utilization", check: func(t *testing.T, v Verdict) {
				oomWant{format: "vllm_startup_free_memory", exception: "ValueError", requested: rnd(21.67 * gib), free: rnd(12.18 * gib), tot: rnd(23.56 * gib), device: "cuda:0"}.check(t, v)
				says(t, v, []string{"It asked for 21.67 GiB on cuda:0, which had 23.56 GiB in total and 12.18 GiB free", "11.38 GiB of the device was already in use", "gpu_memory_utilization=0.92"},
					[]string{"Lower gpu_memory_utilization"}, noBatch)
			}},
		{name: "vLLM free memory, older form without a device", log: "ValueError: Free memory on device (6.92/8.0 GiB) on startup is less than desired GPU memory utilization (0.9, 7.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "vllm_startup_free_memory", exception: "ValueError", requested: rnd(7.2 * gib), free: rnd(6.92 * gib), tot: 8 * gib}.check(t, v)
			}},
		{name: "vLLM sampler warm-up alone", log: "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n",
			kind: KindGPUOOM, rank: -1, reason: "warm-up", check: func(t *testing.T, v Verdict) {
				oomWant{format: "vllm_warmup", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"sampler with 256 dummy requests"}, []string{"max_num_seqs"}, noBatch)
			}},
		{name: "vLLM pooler warm-up", log: "RuntimeError: CUDA out of memory occurred when warming up pooler (task='embed') with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "vllm_warmup", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"pooler with 1024 dummy requests"}, nil, nil)
			}},
		{name: "SGLang mem-fraction-static", log: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.35\n",
			kind: KindGPUOOM, rank: -1, reason: "SGLang", check: func(t *testing.T, v Verdict) {
				oomWant{format: "sglang_mem_fraction", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"--mem-fraction-static was 0.35", "static memory pool"}, []string{"Raise --mem-fraction-static", "--context-length"}, noBatch)
			}},
		{name: "SGLang behind a TP prefix", log: "[2026-01-20 06:44:12 DP0 TP3] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
			kind: KindGPUOOM, rank: 3, check: func(t *testing.T, v Verdict) {
				oomWant{format: "sglang_mem_fraction", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "TGI warm-up", log: "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n",
			kind: KindGPUOOM, rank: -1, reason: "TGI", check: func(t *testing.T, v Verdict) {
				oomWant{format: "tgi_prefill", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"4096 prefill tokens"}, []string{"Lower --max-batch-prefill-tokens"}, noBatch)
			}},
		{name: "TGI wraps PyTorch's OOM: its figures, the engine's remedy", log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 23.57 GiB of which 1.12 GiB is free. Of the allocated memory 21.80 GiB is allocated by PyTorch, and 263.40 MiB is reserved by PyTorch but unallocated.\n\nThe above exception was the direct cause of the following exception:\n\nRuntimeError: Not enough memory to handle 8192 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "tgi_prefill", exception: "torch.OutOfMemoryError", requested: rnd(2.50 * gib), free: rnd(1.12 * gib), tot: rnd(23.57 * gib), device: "GPU 0"}.check(t, v)
				if v.Line != 1 {
					t.Errorf("line %d, want PyTorch's (1)", v.Line)
				}
				says(t, v, []string{"8192 prefill tokens"}, []string{"--max-batch-prefill-tokens"}, noBatch)
			}},

		// Look-alikes.
		{name: "vLLM config dump and KV cache telemetry", log: "INFO 10-08 20:31:09 [core.py:77] Initializing a V1 LLM engine with config: gpu_memory_utilization=0.9, max_model_len=8192, kv_cache_dtype=fp8\nINFO 10-08 20:31:20 [gpu_worker.py:298] Available KV cache memory: 61.04 GiB\nINFO 10-08 20:31:20 [kv_cache_utils.py:1087] GPU KV cache size: 1,142,784 tokens\nWARNING Tune gpu_memory_utilization or max_model_len if the KV cache is too small for your workload.\n",
			kind: KindNone, rank: -1},
		{name: "SGLang arguments and memory telemetry", log: "[2026-03-02 11:02:31] server_args=ServerArgs(mem_fraction_static=0.88, chunked_prefill_size=8192)\n[2026-03-02 11:02:40 TP0] Memory pool end. avail mem=7.52 GB\nnot enough memory headroom detected by the benchmark, continuing\n",
			kind: KindNone, rank: -1},
		{name: "TGI arguments", log: "2026-02-11T08:14:40.112035Z  INFO text_generation_launcher: Args { max_batch_prefill_tokens: Some(4096), max_total_tokens: Some(8192) }\n",
			kind: KindNone, rank: -1},
	})
}

func TestBackendForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "Level Zero through the Unified Runtime", log: "RuntimeError: level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)\n",
			kind: KindGPUOOM, rank: -1, reason: "UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", check: func(t *testing.T, v Verdict) {
				oomWant{format: "level_zero_out_of_device_memory", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"Level Zero / SYCL"}, []string{"batch size"}, nil)
			}},
		{name: "Level Zero's own code", log: "[rank1]: RuntimeError: zeMemAllocDevice failed: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY\n",
			kind: KindGPUOOM, rank: 1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "level_zero_out_of_device_memory", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "older SYCL out of resources", log: "RuntimeError: Native API failed. Native API returns: -5 (PI_ERROR_OUT_OF_RESOURCES) -5 (PI_ERROR_OUT_OF_RESOURCES)\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "sycl_out_of_resources", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "Level Zero host memory", log: "RuntimeError: level_zero backend failed with error: 38 (UR_RESULT_ERROR_OUT_OF_HOST_MEMORY)\n",
			kind: KindCPUAllocOOM, rank: -1, reason: "UR_RESULT_ERROR_OUT_OF_HOST_MEMORY"},
		{name: "CUDA driver API", log: "Returning 2 (CUDA_ERROR_OUT_OF_MEMORY) from cuDevicePrimaryCtxRetain\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "cuda_driver_out_of_memory", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "torch.AcceleratorError on CUDA", log: "torch.AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n",
			kind: KindGPUOOM, rank: -1, reason: "CUDA error: out of memory", check: func(t *testing.T, v Verdict) {
				oomWant{format: "accelerator_error", exception: "torch.AcceleratorError", requested: -1, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"torch.AcceleratorError"}, nil, nil)
			}},
		{name: "torch.AcceleratorError on ROCm", log: "[rank2]: torch.AcceleratorError: HIP error: out of memory\n[rank2]: Search for `hipErrorOutOfMemory' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more information.\n",
			kind: KindGPUOOM, rank: 2, reason: "HIP error: out of memory", check: func(t *testing.T, v Verdict) {
				oomWant{format: "accelerator_error", exception: "torch.AcceleratorError", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "RuntimeError CUDA error keeps its format", log: "RuntimeError: CUDA error: out of memory\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "cuda_error", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "XPU allocator", log: "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.11 GiB of which 1.38 GiB is free. Of the allocated memory 12.47 GiB is allocated by PyTorch, and 812.00 MiB is reserved by PyTorch but unallocated.\n",
			kind: KindGPUOOM, rank: -1, reason: "XPU out of memory", check: func(t *testing.T, v Verdict) {
				oomWant{format: "modern_xpu", exception: "torch.OutOfMemoryError", requested: 2 * gib, free: rnd(1.38 * gib), tot: rnd(15.11 * gib), device: "GPU 0"}.check(t, v)
			}},
		{name: "TF 2.1x graph execution, Detected at node", log: "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\nDetected at node resnet/conv2d_17/Conv2D defined at (most recent call last):\n  File \"/home/ml/train.py\", line 71, in <module>\n  File \"/usr/lib/python3/dist-packages/keras/src/backend/tensorflow/trainer.py\", line 51, in train_step\n\nOOM when allocating tensor with shape[128,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\t [[{{node resnet/conv2d_17/Conv2D}}]]\n [Op:__inference_one_step_on_iterator_20412]\n",
			kind: KindGPUOOM, phase: PhaseTrain /* the train_step frame */, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "tf_oom_tensor", exception: "tensorflow.python.framework.errors_impl.ResourceExhaustedError", requested: 128 * 256 * 56 * 56 * 4, free: -1, tot: -1, device: "/job:localhost/replica:0/task:0/device:GPU:0"}.check(t, v)
				if v.Line != 7 {
					t.Errorf("line %d, want the OOM line (7)", v.Line)
				}
			}},
		{name: "TF eager failed to allocate memory", log: "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node __wrapped__Cast_device_/job:localhost/replica:0/task:0/device:GPU:1}} failed to allocate memory [Op:Cast]\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "tf_failed_to_allocate", exception: "tensorflow.python.framework.errors_impl.ResourceExhaustedError", requested: -1, free: -1, tot: -1, device: "device:GPU:1"}.check(t, v)
				says(t, v, []string{"op Cast"}, nil, nil)
			}},
		{name: "Keras 3 ResourceExhaustedError head alone", log: "ResourceExhaustedError: Exception encountered when calling Activation.call().\n\n{{function_node __wrapped__Sigmoid_device_/job:localhost/replica:0/task:0/device:GPU:0}} failed to allocate memory [Op:Sigmoid] name: \n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "tf_resource_exhausted", exception: "ResourceExhaustedError", requested: -1, free: -1, tot: -1}.check(t, v)
			}},
		{name: "JAX size in TiB, newest module name", log: "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.50TiB. [executable_name='jit_train_step']\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "xla_resource_exhausted", exception: "jax.errors.JaxRuntimeError", requested: 3 << 39, free: -1, tot: -1}.check(t, v)
				says(t, v, []string{"It asked for 1.50 TiB"}, []string{"XLA_PYTHON_CLIENT_MEM_FRACTION"}, nil)
			}},
		{name: "jaxlib._jax Attempting to allocate", log: "jaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 12.00G. That was not possible. There are 3.25G free.; (0x0x0_HBM0)\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "xla_resource_exhausted", exception: "jaxlib._jax.XlaRuntimeError", requested: 12 * gib, free: rnd(3.25 * gib), tot: -1}.check(t, v)
			}},
		{name: "XLA Out of memory allocating bytes on a device", log: "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 4294967296 bytes on device 0.\n",
			kind: KindGPUOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				oomWant{format: "xla_resource_exhausted", exception: "jaxlib.xla_extension.XlaRuntimeError", requested: 4 * gib, free: -1, tot: -1}.check(t, v)
			}},

		// Look-alikes.
		{name: "status codes in headers, tables and prose", log: "#define UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY 39\n    CASE(UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, PI_ERROR_OUT_OF_RESOURCES)\nINFO: retry policy covers UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (see docs)\n// CUDA_ERROR_OUT_OF_MEMORY is retried once\n",
			kind: KindNone, rank: -1},
		{name: "an AcceleratorError that is not memory", log: "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n",
			kind: KindCrash, rank: -1, reason: "illegal memory access"},
		{name: "a ResourceExhaustedError mentioned in a log line", log: "INFO: caught ResourceExhaustedError earlier, batch size is now 16\n",
			kind: KindNone, rank: -1},
	})
}

// isBuild checks a verdict about a compiler killed while building: the
// flag, and advice on build jobs, never a smaller batch or fewer workers.
func isBuild(prog string) func(t *testing.T, v Verdict) {
	return func(t *testing.T, v Verdict) {
		t.Helper()
		if !v.Build || v.SharedMemory || !strings.Contains(v.Reason, prog) {
			t.Errorf("build %v shm %v reason %q, want a build of %s", v.Build, v.SharedMemory, v.Reason, prog)
		}
		says(t, v, []string{"while building an extension at start-up", prog}, []string{"MAX_JOBS"}, append([]string{"num_workers", "--mem"}, noBatch...))
	}
}

func TestBuildKilledForms(t *testing.T) {
	runCases(t, []classifyCase{
		{name: "GCC 7 and later", log: "c++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n", kind: KindHostOOM, rank: -1, check: isBuild("cc1plus")},
		{name: "a cross compiler's driver", log: "x86_64-linux-gnu-g++: fatal error: Killed signal terminated program cc1plus\n", kind: KindHostOOM, rank: -1, check: isBuild("cc1plus")},
		{name: "C, not C++", log: "gcc: fatal error: Killed signal terminated program cc1\n", kind: KindHostOOM, rank: -1, check: isBuild("cc1")},
		{name: "older GCC", log: "g++: internal compiler error: Killed (program cc1plus)\nPlease submit a full bug report,\n", kind: KindHostOOM, rank: -1, check: isBuild("cc1plus")},
		{name: "nvcc's front end", log: "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\nninja: build stopped: subcommand failed.\n", kind: KindHostOOM, rank: -1, check: isBuild("cicc")},
		{name: "nvcc with a path", log: "nvcc error : '\"$CICC_PATH/cudafe++\"' died due to signal 9 (Kill signal)\n", kind: KindHostOOM, rank: -1, check: isBuild("cudafe++")},
		{name: "make's Killed first, then GCC's line", log: "[ 63%] Building CXX object csrc/CMakeFiles/_ext.dir/nms.cpp.o\nKilled\nc++: fatal error: Killed signal terminated program cc1plus\n",
			kind: KindHostOOM, rank: -1, check: func(t *testing.T, v Verdict) {
				isBuild("cc1plus")(t, v)
				if v.Line != 2 {
					t.Errorf("line %d, want make's Killed (2)", v.Line)
				}
			}},
		{name: "the extension's error after the kill does not replace it", log: "c++: fatal error: Killed signal terminated program cc1plus\nsubprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\nRuntimeError: Error building extension 'fused_adam'\n",
			kind: KindHostOOM, rank: -1, check: isBuild("cc1plus")},

		// Look-alikes.
		{name: "MAX_JOBS hint and prose", log: "Allowing ninja to set a default number of workers... (overridable by setting the environment variable MAX_JOBS=N)\nnote: if the build stops with \"Killed signal terminated program\" retry with fewer jobs\nworker w3 died due to signal 9 and was restarted\n", kind: KindNone, rank: -1},
		{name: "a plain Killed is not a build", log: "Killed\n", kind: KindHostOOM, rank: -1, check: func(t *testing.T, v Verdict) {
			if v.Build {
				t.Error("build set for a bare Killed")
			}
		}},
		{name: "GCC killed for another reason", log: "c++: fatal error: Killed signal terminated program as\n", kind: KindHostOOM, rank: -1, check: isBuild("as")},
	})
}

// The bare "Killed" a serving engine's launcher prints at the end does not
// replace the engine's own message.
func TestEngineThenKilled(t *testing.T) {
	v := classifyString(t, "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\nRuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\nKilled\n", ClassifierOptions{})
	if v.Kind != KindGPUOOM || v.Line != 1 || v.OOM == nil || v.OOM.Format != "vllm_no_cache_blocks" {
		t.Errorf("kind %s line %d oom %+v, want the engine's gpu_oom at line 1", v.Kind, v.Line, v.OOM)
	}
}

func TestForms2026Samples(t *testing.T) {
	dir := filepath.Join("testdata", "forms2026")
	samples := []struct {
		file  string
		kind  Kind
		check func(t *testing.T, v Verdict)
	}{
		{"vllm-v1-kv-cache-engine-core.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_kv_cache", exception: "ValueError", requested: 10 * gib, free: rnd(6.21 * gib), tot: -1}.check(t, v)
			if v.Line != 14 || v.Rank != nil {
				t.Errorf("line %d rank %s, want the ValueError (14) and no rank (EngineCore_DP0 names the data-parallel engine)", v.Line, fmtPtr(v.Rank))
			}
		}},
		{"vllm-v1-kv-cache-wrapped.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_kv_cache", exception: "ValueError", requested: 18 * gib, free: rnd(3.90 * gib), tot: -1}.check(t, v)
		}},
		{"vllm-no-cache-blocks-worker.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_no_cache_blocks", exception: "ValueError", requested: -1, free: -1, tot: -1}.check(t, v)
			if v.Rank == nil || *v.Rank != 1 || v.Line != 8 {
				t.Errorf("rank %s line %d, want rank 1 at line 8", fmtPtr(v.Rank), v.Line)
			}
		}},
		{"vllm-v0-max-seq-len.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_kv_cache", exception: "ValueError", requested: -1, free: -1, tot: -1}.check(t, v)
			says(t, v, []string{"32768 tokens", "21264 tokens"}, nil, noBatch)
		}},
		{"vllm-free-memory-startup.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_startup_free_memory", exception: "ValueError", requested: rnd(21.67 * gib), free: rnd(12.18 * gib), tot: rnd(23.56 * gib), device: "cuda:0"}.check(t, v)
		}},
		{"vllm-healthy-config-dump.log", KindNone, nil},
		{"vllm-sampler-warmup.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "vllm_warmup", exception: "torch.OutOfMemoryError", requested: rnd(1.96 * gib), free: rnd(1.02 * gib), tot: rnd(47.37 * gib), device: "GPU 0"}.check(t, v)
			if v.Line != 5 {
				t.Errorf("line %d, want PyTorch's OOM (5)", v.Line)
			}
			says(t, v, []string{"256 dummy requests"}, []string{"Lower max_num_seqs"}, noBatch)
		}},
		{"sglang-mem-fraction.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "sglang_mem_fraction", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
			if v.Line != 8 {
				t.Errorf("line %d, want the RuntimeError (8), not the Killed at the end", v.Line)
			}
		}},
		{"sglang-tp-prefixed.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			if v.Rank == nil || *v.Rank != 3 {
				t.Errorf("rank %s, want 3", fmtPtr(v.Rank))
			}
		}},
		{"tgi-warmup-prefill.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "tgi_prefill", exception: "torch.OutOfMemoryError", requested: rnd(2.50 * gib), free: rnd(1.12 * gib), tot: rnd(23.57 * gib), device: "GPU 0"}.check(t, v)
			says(t, v, []string{"8192 prefill tokens"}, []string{"--max-batch-prefill-tokens"}, noBatch)
		}},
		{"tgi-router-only.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "tgi_prefill", requested: -1, free: -1, tot: -1}.check(t, v)
		}},
		{"xpu-level-zero-ur.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "level_zero_out_of_device_memory", exception: "RuntimeError", requested: -1, free: -1, tot: -1}.check(t, v)
			if v.Phase != PhaseTrain {
				t.Errorf("phase %q", v.Phase)
			}
		}},
		{"xpu-sycl-pi-out-of-resources.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			if v.Rank == nil || *v.Rank != 1 {
				t.Errorf("rank %s", fmtPtr(v.Rank))
			}
		}},
		{"xpu-torch-allocator.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "modern_xpu", exception: "torch.OutOfMemoryError", requested: 2 * gib, free: rnd(1.38 * gib), tot: rnd(15.11 * gib), device: "GPU 0"}.check(t, v)
		}},
		{"ur-header-lookalike.log", KindNone, nil},
		{"torch28-accelerator-error-cuda.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "accelerator_error", exception: "torch.AcceleratorError", requested: -1, free: -1, tot: -1}.check(t, v)
		}},
		{"torch28-accelerator-error-hip.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			if v.Rank == nil || *v.Rank != 2 || v.OOM.Format != "accelerator_error" {
				t.Errorf("rank %s format %q", fmtPtr(v.Rank), v.OOM.Format)
			}
		}},
		{"cuda-driver-ctx.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "cuda_driver_out_of_memory", requested: -1, free: -1, tot: -1}.check(t, v)
		}},
		{"tf216-graph-execution-detected-at-node.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "tf_oom_tensor", exception: "tensorflow.python.framework.errors_impl.ResourceExhaustedError", requested: 128 * 256 * 56 * 56 * 4, free: -1, tot: -1, device: "/job:localhost/replica:0/task:0/device:GPU:0"}.check(t, v)
			if v.Line != 24 || v.Phase != PhaseTrain {
				t.Errorf("line %d phase %q, want the OOM line (24) in training", v.Line, v.Phase)
			}
		}},
		{"tf212-graph-execution-node-quoted.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			// The BFC allocator's own line comes first and carries the size.
			oomWant{format: "tf_bfc_ran_out", requested: rnd(1.53 * gib), free: -1, tot: -1}.check(t, v)
		}},
		{"tf-eager-failed-to-allocate.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "tf_failed_to_allocate", exception: "tensorflow.python.framework.errors_impl.ResourceExhaustedError", requested: -1, free: -1, tot: -1, device: "device:GPU:1"}.check(t, v)
		}},
		{"keras3-exception-encountered.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "tf_resource_exhausted", exception: "ResourceExhaustedError", requested: -1, free: -1, tot: -1}.check(t, v)
		}},
		{"jax-tib-request.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "xla_resource_exhausted", exception: "jax.errors.JaxRuntimeError", requested: 3 << 39, free: -1, tot: -1}.check(t, v)
		}},
		{"jax-attempting-to-allocate.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "xla_resource_exhausted", exception: "jaxlib._jax.XlaRuntimeError", requested: 12 * gib, free: rnd(3.25 * gib), tot: -1}.check(t, v)
		}},
		{"jax-out-of-memory-allocating-bytes.log", KindGPUOOM, func(t *testing.T, v Verdict) {
			oomWant{format: "xla_resource_exhausted", requested: 4 * gib, free: -1, tot: -1}.check(t, v)
		}},
		{"build-deepspeed-fused-adam-cc1plus.log", KindHostOOM, func(t *testing.T, v Verdict) {
			isBuild("cc1plus")(t, v)
			if v.Line != 9 {
				t.Errorf("line %d, want GCC's line (9), not the RuntimeError after it", v.Line)
			}
		}},
		{"build-flash-attn-nvcc-cicc.log", KindHostOOM, isBuild("cicc")},
		{"build-make-killed-then-gcc.log", KindHostOOM, func(t *testing.T, v Verdict) {
			isBuild("cc1plus")(t, v)
			if v.Line != 3 {
				t.Errorf("line %d, want make's Killed (3)", v.Line)
			}
		}},
		{"build-lookalikes.log", KindNone, nil},
	}
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(m) != len(samples) {
		t.Fatalf("%d samples under %s, %d in the table (%v): every sample needs its case", len(m), dir, len(samples), err)
	}
	for _, s := range samples {
		t.Run(s.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, s.file))
			if err != nil {
				t.Fatal(err)
			}
			v := classifyString(t, string(data), ClassifierOptions{})
			if v.Kind != s.kind {
				t.Fatalf("kind %s (%q at line %d: %q), want %s", v.Kind, v.Reason, v.Line, v.Text, s.kind)
			}
			if s.check != nil {
				s.check(t, v)
			}
			// Cut anywhere, the stream gives the same verdict.
			for _, k := range []int{len(data) / 3, len(data) / 2, 2 * len(data) / 3} {
				if w := fuzzClassify(t, data[:k], data[k:]); w.Kind != v.Kind || w.Line != v.Line {
					t.Errorf("cut at %d: %s at line %d, whole: %s at line %d", k, w.Kind, w.Line, v.Kind, v.Line)
				}
			}
		})
	}
}

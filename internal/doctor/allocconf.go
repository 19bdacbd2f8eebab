package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/allocconf"
	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/policy"
)

// allocConfVars are the variables PyTorch reads as allocator option lists.
// PyTorch reads PYTORCH_ALLOC_CONF (2.9 on), else PYTORCH_CUDA_ALLOC_CONF;
// PYTORCH_HIP_ALLOC_CONF on ROCm.
var allocConfVars = []string{"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"}

// allocOptions are the options PyTorch's caching allocator accepts, and
// what each value must be; any other key stops PyTorch at its first
// allocation ("Unrecognized CachingAllocator option", or "Unrecognized key
// ... in Accelerator allocator config" from 2.9 on).
var allocOptions = map[string]func(string) string{
	"max_split_size_mb":                 intAbove(20),
	"max_non_split_rounding_mb":         intAbove(0),
	"garbage_collection_threshold":      fraction,
	"roundup_power2_divisions":          powerOfTwoOrList,
	"expandable_segments":               trueFalse,
	"backend":                           oneOf("native", "cudaMallocAsync"),
	"release_lock_on_cudamalloc":        trueFalse,
	"pinned_use_cuda_host_register":     trueFalse,
	"pinned_num_register_threads":       powerOfTwoUpTo(128),
	"pinned_use_background_threads":     trueFalse,
	"pinned_reserve_segment_size_mb":    intAbove(0),
	"graph_capture_record_stream_reuse": trueFalse,
	"per_process_memory_fraction":       fractionUpTo1,
}

// allocConfProblems are what PyTorch would reject in the allocator option
// list value of the variable name, one sentence each.
func allocConfProblems(name, value string) []string {
	opts, err := allocconf.Parse(value)
	if err != nil {
		return []string{fmt.Sprintf("%s=%s: %v; PyTorch stops at its first CUDA allocation", name, value, err)}
	}
	keys := make([]string, 0, len(allocOptions))
	for k := range allocOptions {
		keys = append(keys, k)
	}
	var out []string
	for _, o := range opts {
		check, ok := allocOptions[o.Key]
		if !ok {
			out = append(out, fmt.Sprintf("%s=%s: unknown option %q%s; PyTorch rejects it at its first CUDA allocation",
				name, value, o.Key, policy.DidYouMean(o.Key, keys)))
			continue
		}
		if why := check(o.Value); why != "" {
			out = append(out, fmt.Sprintf("%s=%s: %s must be %s, not %q", name, value, o.Key, why, o.Value))
		}
	}
	return out
}

func trueFalse(v string) string {
	if v == "True" || v == "False" {
		return ""
	}
	return "True or False (capitalised)"
}

func oneOf(values ...string) func(string) string {
	return func(v string) string {
		for _, w := range values {
			if v == w {
				return ""
			}
		}
		return strings.Join(values, " or ")
	}
}

func intAbove(n uint64) func(string) string {
	return func(v string) string {
		if x, err := strconv.ParseUint(v, 10, 64); err == nil && x > n {
			return ""
		}
		return fmt.Sprintf("a whole number above %d", n)
	}
}

func fraction(v string) string {
	if x, err := strconv.ParseFloat(v, 64); err == nil && x > 0 && x < 1 {
		return ""
	}
	return "a number between 0 and 1 (exclusive)"
}

func fractionUpTo1(v string) string {
	if x, err := strconv.ParseFloat(v, 64); err == nil && x > 0 && x <= 1 {
		return ""
	}
	return "a number above 0, at most 1"
}

func powerOfTwoUpTo(n uint64) func(string) string {
	return func(v string) string {
		if x, err := strconv.ParseUint(v, 10, 64); err == nil && x > 0 && x&(x-1) == 0 && x <= n {
			return ""
		}
		return fmt.Sprintf("a power of two up to %d", n)
	}
}

// powerOfTwoOrList: "4", or "[256:1,512:2,>:4]" (a power of two for each
// size, or for ">": the sizes above the last).
func powerOfTwoOrList(v string) string {
	const want = "a power of two, or a list like [256:1,512:2,>:4] of sizes (MB, powers of two) and powers of two"
	pow2 := func(s string) bool {
		x, err := strconv.ParseUint(s, 10, 64)
		return err == nil && (x == 0 || x&(x-1) == 0)
	}
	if !strings.HasPrefix(v, "[") {
		if pow2(v) {
			return ""
		}
		return want
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
	for _, item := range strings.Split(inner, ",") {
		size, div, ok := strings.Cut(item, ":")
		if !ok || !pow2(div) || (size != ">" && !pow2(size)) {
			return want
		}
	}
	return ""
}

// AllocConfProblems are the problems doctor reports in the allocator
// variables of env (KEY=VALUE), for `gpuguard run` to warn before it starts.
func AllocConfProblems(env []string) []string {
	var out []string
	for _, k := range allocConfVars {
		if v, ok := envlist.Lookup(env, k); ok {
			out = append(out, allocConfProblems(k, v)...)
		}
	}
	return out
}

//go:build !cgo || nonvml

package doctor

import "github.com/gpuguard/gpuguard/internal/probes/gpu"

// nvmlFacts: this build has no NVML; the null probe says why.
func nvmlFacts(env []string, _ string) gpuFacts {
	_, why := gpu.Open(env, nil).Available()
	return gpuFacts{Why: why}
}

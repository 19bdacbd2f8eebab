//go:build !cgo || nonvml

package report

import "github.com/gpuguard/gpuguard/internal/probes/gpu"

// nvmlFacts: this build has no NVML; the null probe says why.
func nvmlFacts(env []string, _ string) GPUFacts {
	_, why := gpu.Open(env, nil).Available()
	return GPUFacts{Why: why}
}

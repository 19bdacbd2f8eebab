//go:build !cgo || nonvml

package report

import "github.com/gpuguard/gpuguard/internal/probes"

// nvmlFacts: this build has no NVML; the null probe says why.
func nvmlFacts(env []string, _ string) GPUFacts {
	_, why := probes.OpenGPU(env, nil).Available()
	return GPUFacts{Why: why}
}

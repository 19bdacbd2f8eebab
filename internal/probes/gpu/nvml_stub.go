//go:build !cgo || nonvml

package gpu

import "go.uber.org/zap"

// Open returns the null probe: this gpuguard was built without NVML
// support (cgo disabled, or the nonvml build tag), so GPU memory is never
// sampled. The reason is logged once, at Info level. log may be nil.
func Open(env []string, log *zap.Logger) Probe {
	why := "gpuguard was built without NVML support (CGO_ENABLED=0 or -tags nonvml); rebuild with cgo to sample GPU memory"
	if log != nil {
		log.Info("GPU memory will not be sampled", zap.String("reason", why))
	}
	return None(why)
}

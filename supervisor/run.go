package supervisor

import "fmt"

// Run runs the job described by cfg and returns gpuguard's exit status.
func Run(cfg Config) int {
	fmt.Fprintln(cfg.Stderr, "gpuguard: run is not implemented yet")
	return ExitSoftware
}

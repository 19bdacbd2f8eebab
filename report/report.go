// Package report implements `gpuguard report` (a run directory's attempts,
// memory peaks and a plot) and `gpuguard doctor`.
package report

import (
	"fmt"
	"io"
)

// Options are the inputs of `gpuguard report`.
type Options struct {
	RunDir string
	JSON   bool
	Plot   string // output file, .png or .svg; "" for none
	Stdout io.Writer
	Stderr io.Writer
}

// Command runs `gpuguard report` and returns its exit status.
func Command(o Options) int {
	fmt.Fprintln(o.Stderr, "gpuguard: report is not implemented yet")
	return 70
}

// DoctorOptions are the inputs of `gpuguard doctor`.
type DoctorOptions struct {
	JSON   bool
	Stdout io.Writer
	Stderr io.Writer
}

// Doctor runs `gpuguard doctor` and returns its exit status.
func Doctor(o DoctorOptions) int {
	fmt.Fprintln(o.Stderr, "gpuguard: doctor is not implemented yet")
	return 70
}

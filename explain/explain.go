// Package explain implements `gpuguard explain`: the classifier's verdict on
// finished logs, in plain words or as JSON.
package explain

import (
	"fmt"
	"io"
)

// Options are the inputs of `gpuguard explain`.
type Options struct {
	Paths  []string // log files; "-" is stdin
	JSON   bool
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Command runs `gpuguard explain` and returns its exit status.
func Command(o Options) int {
	fmt.Fprintln(o.Stderr, "gpuguard: explain is not implemented yet")
	return 70
}

package policies

import (
	"fmt"
	"io"
)

// Check validates a policy file (or preset name) and returns an exit status:
// 0 when valid, 78 with file:line:col messages on stderr when not.
func Check(path string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "gpuguard: policy check is not implemented yet")
	return 70
}

// Init writes a commented starter policy for the command argv to stdout.
func Init(argv []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "gpuguard: policy init is not implemented yet")
	return 70
}

// List prints the built-in presets.
func List(stdout io.Writer) int {
	return 0
}

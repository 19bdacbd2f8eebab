// Package procfstest holds what the tests of process lists share. It
// imports nothing of gpuguard, so that procfs's own tests can use it as
// well as the tests of the packages built on procfs.
package procfstest

import "slices"

// SortedPIDs returns the pids of ps (pid of each), sorted: a process list
// as tests compare it.
func SortedPIDs[P any](ps []P, pid func(P) int) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, pid(p))
	}
	slices.Sort(out)
	return out
}

// Package memory is the memory sampler (Sampler): it samples the job's GPU
// and host memory at the policy's base rate, faster in validation and after
// a phase change, keeps the peak of each phase and what was in use when
// each began, writes timeline.csv, and warns of a leak (a peak that grows
// epoch after epoch) or a host limit near. It observes; the policy decides
// what the peaks mean.
package memory

// Package e2e holds gpuguard's end-to-end tests on real PyTorch: a small
// training job (torchjob/train_torch.py) runs on the CPU under a memory limit
// and runs out of memory for real, the way jobs on a GPU do, and gpuguard
// brings it back from its checkpoint with settings that fit.
//
// The scenarios, the limits, why they are what they are, and the measured
// timings are in docs/e2e.md. The tests need Debian's python3-torch
// (/usr/bin/python3 -c 'import torch'), and, for the DataLoader-worker
// scenario, root and a memory cgroup; without them they skip and say what is
// missing. Run them with
//
//	go test ./e2e/ -v
//
// The package has no API: everything is in its tests.
package e2e

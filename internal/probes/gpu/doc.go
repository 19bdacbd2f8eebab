// Package gpu observes the GPUs a job uses: gpu.Probe samples each device's
// memory and the job's share of it, through NVML where this build has cgo
// (Open, FromNVML) and as gpu.None where it has no GPU to read; it resolves
// CUDA_VISIBLE_DEVICES to devices, and waits until a dead attempt's memory
// is released (WaitRelease). Tests use gputest.Fake and nvmltest.Machine.
package gpu

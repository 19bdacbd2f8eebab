package classify

import (
	"strings"
	"testing"
)

// Phase lines and failures the advice table combines.
const (
	adTrain   = "Epoch 1:  50%|█████     | 50/100 [00:10<00:10,  5.00it/s, loss=0.512]\n"
	adVal     = "Validation DataLoader 0:  40%|████      | 4/10 [00:01<00:01,  3.00it/s]\n"
	adCPU     = "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 12582912 bytes.\n"
	adCaught  = "RuntimeError: Caught RuntimeError in DataLoader worker process 3.\nOriginal Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py\", line 309, in _worker_loop\n    data = fetcher.fetch(index)\n"
	adKilled  = "RuntimeError: DataLoader worker (pid 41122) is killed by signal: Killed.\n"
	adKernel  = "[Mon Mar  2 10:01:12 2026] Out of memory: Killed process 41100 (python) total-vm:81240388kB, anon-rss:60411256kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:121000kB oom_score_adj:0\n"
	adShm     = "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
	adGPU     = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.02 GiB is free. Of the allocated memory 21.10 GiB is allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.\n"
	adGPUFrag = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.02 GiB is free. Of the allocated memory 18.10 GiB is allocated by PyTorch, and 3.20 GiB is reserved by PyTorch but unallocated.\n"
)

// Suggestion fragments, as the table names them.
const (
	sgWorkers   = "fewer DataLoader workers"
	sgValCrop   = "VAL_CROP_SIZE"
	sgTrainHost = "The training step built too large a tensor in host RAM"
	sgShm       = "--shm-size"
	sgTrainGPU  = "Lower the training batch size and raise gradient accumulation"
	sgValGPU    = "Validation ran out of memory"
	sgAnyBatch  = "Lower the batch size (or the input size)"
	sgAlloc     = "expandable_segments:True"
)

// TestAdviceByKindPhaseRequester: the suggestions follow what ran out, the
// phase and what asked for the memory. first is the suggestion that must
// come first; want the others it must make, never those it must not.
func TestAdviceByKindPhaseRequester(t *testing.T) {
	for _, c := range []struct {
		name      string
		log       string
		kind      Kind
		phase     Phase
		requester string
		first     string
		want      []string
		never     []string
	}{
		{"CPU allocator in validation, main process", adVal + adCPU, KindCPUAllocOOM, PhaseVal, "", sgValCrop, nil, []string{sgWorkers}},
		{"CPU allocator in validation, DataLoader worker", adVal + adCaught + adCPU, KindCPUAllocOOM, PhaseVal, RequesterDataLoaderWorker, sgWorkers, nil, []string{sgValCrop}},
		{"CPU allocator in training, DataLoader worker", adTrain + adCaught + adCPU, KindCPUAllocOOM, PhaseTrain, RequesterDataLoaderWorker, sgWorkers, nil, []string{sgTrainHost}},
		{"CPU allocator in training, main process", adTrain + adCPU, KindCPUAllocOOM, PhaseTrain, "", sgTrainHost, []string{sgWorkers}, []string{sgValCrop}},
		{"CPU allocator, phase unknown", adCPU, KindCPUAllocOOM, PhaseNone, "", sgWorkers, nil, []string{sgValCrop, sgTrainHost}},
		{"host OOM, DataLoader worker killed in training", adTrain + adKilled, KindHostOOM, PhaseTrain, RequesterDataLoaderWorker, sgWorkers, nil, []string{sgValCrop}},
		{"host OOM, DataLoader worker killed in validation", adVal + adKilled, KindHostOOM, PhaseVal, RequesterDataLoaderWorker, sgWorkers, nil, []string{sgValCrop}},
		{"host OOM, the kernel killed the main process in validation", adVal + adKernel, KindHostOOM, PhaseVal, "", sgValCrop, []string{sgWorkers}, nil},
		{"shared memory in training", adTrain + adShm, KindHostOOM, PhaseTrain, "", sgWorkers, []string{sgShm}, []string{sgTrainGPU, sgAnyBatch, sgTrainHost}},
		{"GPU in training", adTrain + adGPU, KindGPUOOM, PhaseTrain, "", sgTrainGPU, nil, []string{sgWorkers, sgAlloc}},
		{"GPU in validation", adVal + adGPU, KindGPUOOM, PhaseVal, "", sgValGPU, nil, []string{sgTrainGPU, sgWorkers}},
		{"GPU, fragmented, in training", adTrain + adGPUFrag, KindGPUOOM, PhaseTrain, "", sgAlloc, []string{sgTrainGPU}, []string{sgWorkers}},
		{"GPU, phase unknown", adGPU, KindGPUOOM, PhaseNone, "", sgAnyBatch, nil, []string{sgWorkers}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := classifyString(t, c.log, ClassifierOptions{})
			if v.Kind != c.kind || v.Phase != c.phase || v.Requester != c.requester {
				t.Fatalf("verdict %s in %q, requester %q; want %s in %q, requester %q", v.Kind, v.Phase, v.Requester, c.kind, c.phase, c.requester)
			}
			if len(v.Suggestions) == 0 || !strings.Contains(v.Suggestions[0], c.first) {
				t.Errorf("first suggestion is not %q: %q", c.first, v.Suggestions)
			}
			all := strings.Join(v.Suggestions, "\n")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("no suggestion says %q: %q", w, v.Suggestions)
				}
			}
			for _, n := range c.never {
				if strings.Contains(all, n) {
					t.Errorf("a suggestion says %q: %q", n, v.Suggestions)
				}
			}
		})
	}
}

// The CPU allocator's request prints in the unit that reads best.
func TestAdviceSizes(t *testing.T) {
	v := classifyString(t, adVal+adCPU, ClassifierOptions{})
	if !strings.Contains(v.Diagnosis, "asked for 12.0 MiB") {
		t.Errorf("diagnosis %q", v.Diagnosis)
	}
}

package classify

// The verdict's derived facts (fragmentation, other processes), the effect of
// how the process ended, and the diagnosis in plain words.

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

// sizeWords states a size in the unit that reads best: humanize.Size
// ("15.82 GiB", "12.0 MiB", "812 KiB"), the one way gpuguard writes a size.
func sizeWords(b int64) string { return humanize.Size(b) }

// Fragmentation rule.
//
// By the time PyTorch raises an OOM it has already released every cached
// segment that was entirely free and retried the device allocation. What the
// message still reports as "reserved by PyTorch but unallocated" is therefore
// memory stranded in segments that are partly in use: fragmentation in the
// strict sense, which the allocator cannot hand out for this request and
// which expandable_segments (segments that grow in place instead of new
// fixed-size ones) mostly avoids.
//
// The classifier calls it fragmentation when that stranded memory is
//
//   - at least a fifth of the request: compacting it would have covered a
//     meaningful share of the shortfall (the seed post-mortem: 3.95 GiB
//     stranded against a 15.82 GiB request, "fragmentation plus full-
//     resolution validation"), and when it is at least the request the
//     allocation would have fitted outright; and
//   - at least 256 MiB: below that it is the allocator's block rounding
//     (2 MiB small blocks, 20 MiB large segments) that no setting wins back.
//
// The old message prints the reserved total instead; the stranded part is
// then reserved − allocated.
const (
	fragMinBytes = 256 << 20
	fragMinShare = 5 // stranded >= requested / fragMinShare
)

// Fragmented applies the fragmentation rule to the figures of an OOM
// message. It is false when the message lacks the reserved or requested
// figure.
func Fragmented(o *OOM) bool {
	if o == nil || o.ReservedUnallocatedBytes == nil || o.RequestedBytes == nil {
		return false
	}
	ru, req := *o.ReservedUnallocatedBytes, *o.RequestedBytes
	return ru >= fragMinBytes && ru*fragMinShare >= req
}

// Verdict returns what the classifier concludes so far; after the stream has
// ended (and, live, after Exit) it is final. The returned value shares no
// memory with the classifier.
func (c *Classifier) Verdict() Verdict {
	v := Verdict{Kind: KindNone, Phase: c.phase, Suggestions: []string{}}
	v.Phases = append([]PhaseMark{}, c.marks...)
	setStep(&v, c.st, "")
	if c.st.step >= 0 {
		v.StepText = stepText(c.stText, c.stCut)
	}
	if c.epoch >= 0 {
		v.Epoch = valPtr(c.epoch)
	}
	var f *failure
	if c.cur != nil {
		cp := *c.cur
		f = &cp
	}
	var handled []handledFailure
	handled = append(handled, c.handled...)
	var exitNote string
	if e := c.exit; e != nil {
		f, handled, exitNote = c.applyExit(*e, f, handled)
		v.CgroupOOMKills = e.CgroupOOMKills
	}
	if f != nil {
		v.Kind, v.Reason, v.Line, v.Text, v.Host = f.kind, f.reason, f.line, f.text, f.host
		if f.line > 0 {
			v.Phase = f.phase
			v.Epoch = nil
			setStep(&v, f.st, stepText(f.stText[:f.stLen], f.stCut))
			if f.epoch >= 0 {
				v.Epoch = valPtr(f.epoch)
			}
		}
		if f.rank >= 0 {
			v.Rank = valPtr(f.rank)
		}
		v.SharedMemory = f.shm
		v.Site = f.site
		v.Machine = machineTrouble(f.reason, f.text)
		v.RefusedAllocOption = refusedAllocOption(f.text)
		v.Build = f.family == buildFamily
		if f.worker && f.class == classMemory {
			v.Requester = RequesterDataLoaderWorker
		}
		if f.oom != nil {
			o := *f.oom
			o.OtherProcesses = append([]ProcUse(nil), f.oom.OtherProcesses...)
			v.OOM = &o
			v.Fragmentation = Fragmented(&o)
			v.OtherProcesses = len(o.OtherProcesses) > 0
		}
	}
	v.Diagnosis, v.Suggestions = c.diagnose(&v, f, handled, exitNote)
	return v
}

// setStep sets the verdict's step and where it was read from.
func setStep(v *Verdict, st stepRead, text string) {
	v.Step, v.StepKind, v.StepTotal, v.StepLine, v.StepText = nil, StepNone, nil, 0, ""
	if st.step < 0 {
		return
	}
	v.Step, v.StepKind, v.StepLine, v.StepText = valPtr(st.step), stepKinds[st.kind], st.line, text
	if st.total >= 0 {
		v.StepTotal = valPtr(st.total)
	}
}

// applyExit folds how the process ended into the conclusion.
func (c *Classifier) applyExit(e Exit, f *failure, handled []handledFailure) (*failure, []handledFailure, string) {
	killed := e.Signal == syscall.SIGKILL || e.Signal == 0 && e.Code == 137
	status := fmt.Sprintf("exited with status %d", e.Code)
	if e.Signal != 0 {
		status = fmt.Sprintf("was killed by signal %d (%s)", int(e.Signal), e.Signal)
	}
	switch {
	case e.Code == 0 && e.Signal == 0:
		if f != nil {
			handled = append(handled, handledFailure{kind: f.kind, reason: f.reason, line: f.line})
		}
		return nil, handled, "The job exited with status 0."
	case e.StoppedByUs:
		if f == nil {
			return nil, handled, "gpuguard stopped the job (it " + status + ")."
		}
		return f, handled, "gpuguard stopped the job after the failure (it " + status + ")."
	case e.CgroupOOMKills > 0 && (f == nil || f.kind == KindHostOOM || f.kind == KindCrash && (f.class == classGeneric || killed || f.conseq != conseqNone)):
		// A consequence (another rank's timeout, a broken pipe) is not
		// the cause when the OOM killer killed one of the job's processes.
		note := fmt.Sprintf("The memory cgroup's OOM killer killed %d process(es) during the run, and the job %s.", e.CgroupOOMKills, status)
		if f != nil && f.kind == KindHostOOM {
			f.lowConf = false
			return f, handled, note
		}
		nf := memFailure(KindHostOOM, "killed by the memory cgroup's out-of-memory killer", "cgroup")
		c.snapshot(&nf)
		if f != nil {
			nf.detail = "the error printed at line " + itoa(int64(f.line)) + " (" + f.reason + ") followed from it"
		}
		return &nf, handled, note
	case killed && (f == nil || f.kind == KindCrash && f.class == classGeneric):
		nf := memFailure(KindHostOOM, "killed by SIGKILL with no message (most likely the out-of-memory killer)", "sigkill")
		nf.lowConf = true
		c.snapshot(&nf)
		return &nf, handled, "The job " + status + "."
	case f == nil:
		nf := crashFailure(classGeneric, "the job "+status+" without a recognised error message", "exit")
		c.snapshot(&nf)
		return &nf, handled, ""
	}
	return f, handled, "The job " + status + "."
}

// stepWords says where training was: "at step 1000 (epoch 2)" for a
// training step, "at batch 29/50 of epoch 3" for a position within the
// epoch.
func stepWords(v *Verdict) string {
	if v.StepKind == StepInEpoch {
		s := "at batch " + itoa(*v.Step)
		if v.StepTotal != nil {
			s += "/" + itoa(*v.StepTotal)
		}
		if v.Epoch != nil {
			s += " of epoch " + itoa(*v.Epoch)
		}
		return s
	}
	s := "at step " + itoa(*v.Step)
	if v.Epoch != nil {
		s += " (epoch " + itoa(*v.Epoch) + ")"
	}
	return s
}

// where describes the position of a failure: "during validation at step
// 1000 (epoch 2), on rank 3, at line 5234".
func where(v *Verdict) string {
	var parts []string
	switch v.Phase {
	case PhaseVal:
		parts = append(parts, "during validation")
	case PhaseTrain:
		parts = append(parts, "during training")
	}
	if v.Step != nil {
		parts = append(parts, stepWords(v))
	} else if v.Epoch != nil {
		parts = append(parts, "in epoch "+itoa(*v.Epoch))
	}
	if v.Rank != nil {
		parts = append(parts, "on rank "+itoa(int64(*v.Rank)))
	}
	if v.Host != "" {
		parts = append(parts, "on host "+v.Host)
	}
	if v.Line > 0 {
		parts = append(parts, "at line "+itoa(int64(v.Line)))
	}
	return strings.Join(parts, ", ")
}

func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// diagnose writes the diagnosis and the suggestions.
func (c *Classifier) diagnose(v *Verdict, f *failure, handled []handledFailure, exitNote string) (string, []string) {
	var d []string
	sug := []string{}
	add := func(s ...string) { sug = append(sug, s...) }
	w := where(v)
	switch v.Kind {
	case KindGPUOOM:
		d = append(d, sentence(v.Reason+" "+w))
		d = append(d, gpuOOMFigures(v, f)...)
		d = append(d, engineWords(v, f)...)
		c.gpuOOMAdvice(v, f, &d, add)
	case KindCPUAllocOOM:
		d = cpuAllocDiagnosis(v, f, w, d, add)
	case KindHostOOM:
		d = hostOOMDiagnosis(v, f, w, d, add)
	case KindCrash:
		d = crashDiagnosis(v, f, w, d, add)
	default:
		d = noneDiagnosis(v, d)
	}
	if f != nil && v.Kind != KindNone {
		if f.conseq == conseqAbsurd {
			d = append(d, "The request is absurd (a petabyte or more): a size computed wrong, or the consequence of a collective operation that failed on another rank; no memory setting makes it fit.")
		}
		if f.caught {
			d = append(d, "The program caught this out-of-memory error to go on, but no training step was printed after it: the job ended there.")
		}
		d = append(d, noteWords(c.notes)...)
	}
	for _, h := range handled {
		d = append(d, sentence(fmt.Sprintf("An earlier failure at line %d (%s) did not stop the job: training went on after it", h.line, h.reason)))
	}
	if exitNote != "" {
		d = append(d, exitNote)
	}
	return strings.Join(d, " "), sug
}

// cpuAllocDiagnosis writes the diagnosis and advice of a host allocation
// that failed (cpu_alloc_oom); w says where the job was.
func cpuAllocDiagnosis(v *Verdict, f *failure, w string, d []string, add func(...string)) []string {
	s := "Host memory (RAM) ran out"
	if w != "" {
		s += " " + w
	}
	s += ": " + v.Reason
	d = append(d, sentence(s))
	if f != nil && f.detail != "" {
		d = append(d, sentence(f.detail))
	}
	if v.Requester == RequesterDataLoaderWorker {
		d = append(d, "It failed inside a DataLoader worker, whose exception the main process raised again.")
	}
	if v.OOM != nil && v.OOM.RequestedBytes != nil {
		d = append(d, "The allocation that failed asked for "+sizeWords(*v.OOM.RequestedBytes)+".")
		if *v.OOM.RequestedBytes >= 64<<30 {
			d = append(d, "A single request that large is beyond typical RAM: check the shape of the tensor or array being built.")
		}
	}
	if f != nil && f.family == "windows_commit" {
		add("Let Windows commit more memory: enlarge the paging file (System Properties, Advanced, Virtual memory) or run fewer DataLoader workers, each of which maps the CUDA libraries again.")
	}
	hostAdvice(v, add)
	add("Check the job's memory limit (the Slurm --mem request, the container's or cgroup's limit, ulimit -v) and raise it if the machine has room.")
	return d
}

// hostOOMDiagnosis writes the diagnosis and advice of a kill for host
// memory (host_oom): shared memory, a build, or the reporter's own limit.
func hostOOMDiagnosis(v *Verdict, f *failure, w string, d []string, add func(...string)) []string {
	s := "The job was killed for host memory (RAM)"
	why := v.Reason
	if v.SharedMemory {
		s, why = "The job ran out of shared memory (/dev/shm, which is RAM)", strings.TrimPrefix(why, shmReason+": ")
	}
	if v.Build {
		s = "The job ran out of host memory (RAM) while building an extension at start-up"
	}
	if w != "" {
		s += " " + w
	}
	d = append(d, sentence(s+": "+why))
	if f != nil && f.detail != "" {
		d = append(d, sentence(f.detail))
	}
	if v.SharedMemory {
		d = append(d, "/dev/shm is a RAM-backed filesystem with a size of its own (64 MiB by default in a Docker container): DataLoader workers hand every batch to the main process through it, so it fills up long before the machine's memory does.")
		if f.lowConf {
			d = append(d, "The log shows only the bus error: a DataLoader worker that dies of SIGBUS has almost always written past the end of a full /dev/shm.")
		}
		add("Use fewer DataLoader workers (num_workers) or a smaller prefetch_factor, or give the job a larger shared memory: docker --shm-size (or --ipc=host), on Kubernetes an emptyDir volume with medium: Memory mounted at /dev/shm; a smaller batch is not the remedy.")
		return d
	}
	if v.Build {
		add(buildAdvice()...)
		return d
	}
	if f != nil && f.lowConf {
		d = append(d, "The log does not prove the cause: a process killed by SIGKILL without a message was almost always killed by the out-of-memory killer, but an administrator, a scheduler or a watchdog can do the same; gpuguard run confirms it with the cgroup's OOM-kill counter.")
	}
	if f != nil && f.family == "slurm" {
		add("Ask Slurm for more memory (--mem or --mem-per-cpu) if the node has it.")
	}
	if f != nil && f.family == "container" {
		add("Raise the container's memory limit if the node has room (docker run --memory, Kubernetes resources.limits.memory): the container runtime killed it at that limit.")
	}
	if f != nil && f.family == "ray" {
		add("Schedule fewer tasks per node so each has the RAM it uses: declare the task's memory (ray.remote(memory=...), ScalingConfig resources_per_worker={\"memory\": ...}) or give it more CPUs; raising RAY_memory_usage_threshold only moves the kill to the kernel.")
	}
	if f != nil && f.family == "k8s_eviction" {
		add("Set the pod's memory request to what it uses (resources.requests.memory, equal to limits for the Guaranteed class, which is evicted last), or run it on a node with more memory: the kubelet evicts the pods that use most beyond their request when the node runs low.")
	}
	hostAdvice(v, add)
	if f == nil || f.family != "slurm" && f.family != "container" && f.family != "ray" && f.family != "k8s_eviction" {
		add("If the machine has more memory, raise the job's limit (Slurm --mem, the container's memory limit).")
	}
	return d
}

// crashDiagnosis writes the diagnosis and advice of a failure that is not
// memory's.
func crashDiagnosis(v *Verdict, f *failure, w string, d []string, add func(...string)) []string {
	s := "The job failed, and not for memory: " + v.Reason
	if w != "" {
		s += " (" + w + ")"
	}
	d = append(d, sentence(s))
	if f != nil {
		if e := crashExplain[f.family]; e != "" {
			d = append(d, e)
		}
	}
	d = append(d, "Retrying with less memory will not help.")
	if v.Text != "" {
		// Quoted, so that the sentences after it do not read as part
		// of it.
		d = append(d, "The line: \""+v.Text+"\".")
	}
	if f != nil {
		add(crashAdvice(f)...)
	}
	return d
}

// noneDiagnosis says that nothing failed, and where the log ends.
func noneDiagnosis(v *Verdict, d []string) []string {
	s := "No failure found"
	if v.Phase != PhaseNone {
		s += "; the log ends in " + v.Phase.Words()
		if n := len(v.Phases); n > 0 {
			s += " (since line " + itoa(int64(v.Phases[n-1].Line)) + ")"
		}
	}
	if v.Step != nil {
		s += ", " + stepWords(v)
	}
	d = append(d, sentence(s))
	return d
}

// Host-memory advice, by phase and by what asked for the memory.
const (
	adviceWorkers     = "Use fewer DataLoader workers (num_workers) and set pin_memory=False: every worker holds its own copy of what the dataset object keeps in Python objects, and its prefetched batches."
	adviceWorkersData = "Keep the dataset out of Python lists and dicts in RAM (numpy arrays or memory-mapped files are shared between workers), load samples lazily, and lower prefetch_factor."
	adviceValCrop     = "Validation holds too much in host RAM in the main process: validate on crops or tiles instead of full-resolution inputs (a smaller validation crop size, e.g. VAL_CROP_SIZE, or a lower eval resolution), and accumulate metrics batch by batch instead of keeping every prediction."
	adviceTrainHost   = "The training step built too large a tensor in host RAM: lower the batch size or the input size, and check the shape of what is built on the CPU (a collate function, a CPU-side augmentation, gathered outputs)."
)

// hostAdvice suggests how to hold less in host RAM, by what asked for the
// memory and the phase: a DataLoader worker's allocation calls for fewer
// workers; the main process's in validation for smaller validation inputs,
// where fewer workers would not help.
func hostAdvice(v *Verdict, add func(...string)) {
	switch {
	case v.Requester == RequesterDataLoaderWorker:
		add(adviceWorkers, adviceWorkersData)
	case v.Phase == PhaseVal && v.Kind == KindCPUAllocOOM:
		add(adviceValCrop)
	case v.Phase == PhaseVal:
		add(adviceValCrop, adviceWorkers)
	case v.Phase == PhaseTrain && v.Kind == KindCPUAllocOOM:
		add(adviceTrainHost, adviceWorkers)
	default:
		add(adviceWorkers, adviceWorkersData)
	}
}

// gpuOOMFigures states the message's figures in GiB.
func gpuOOMFigures(v *Verdict, f *failure) []string {
	o := v.OOM
	if o == nil {
		return nil
	}
	var d []string
	var s string
	switch {
	case o.RequestedBytes != nil:
		s = "It asked for " + sizeWords(*o.RequestedBytes)
		if f != nil && f.extra.tfShape != "" {
			s += " (a " + f.extra.tfType + " tensor of " + f.extra.tfShape + ")"
		}
		if o.Device != nil {
			s += " on " + *o.Device
		}
	case o.Device != nil:
		s = "It failed on " + *o.Device
	default:
		s = "The message gives no sizes"
	}
	var dev []string
	if o.TotalBytes != nil {
		dev = append(dev, sizeWords(*o.TotalBytes)+" in total")
	}
	if o.FreeBytes != nil {
		dev = append(dev, sizeWords(*o.FreeBytes)+" free")
	}
	if len(dev) > 0 {
		s += ", which had " + strings.Join(dev, " and ")
	}
	if o.RequestedBytes == nil && o.Device != nil {
		s += "; the message gives no request size"
	}
	d = append(d, s+".")
	var held []string
	if o.InUseBytes != nil {
		held = append(held, "this process held "+sizeWords(*o.InUseBytes)+" in all")
	}
	if o.AllocatedBytes != nil {
		a := "PyTorch had " + sizeWords(*o.AllocatedBytes) + " allocated to tensors"
		if o.Format == "mps" {
			a = "MPS had " + sizeWords(*o.AllocatedBytes) + " allocated"
		}
		held = append(held, a)
	}
	if o.ReservedUnallocatedBytes != nil {
		held = append(held, sizeWords(*o.ReservedUnallocatedBytes)+" reserved but unallocated")
	}
	if len(held) > 0 {
		d = append(d, sentence(strings.Join(held, "; ")))
	}
	if f != nil {
		x := f.extra
		if x.mpsOther != nil && x.mpsMax != nil {
			d = append(d, "Other allocations held "+sizeWords(*x.mpsOther)+" against an MPS limit of "+sizeWords(*x.mpsMax)+".")
		}
		if x.allowed != nil {
			s := "A per-process limit (torch.cuda.set_per_process_memory_fraction) allowed this process only " + sizeWords(*x.allowed)
			if o.FreeBytes != nil {
				s += ", while the device itself had " + sizeWords(*o.FreeBytes) + " free"
			}
			d = append(d, s+".")
		}
	}
	return d
}

// likelySelf says whether the only "Process N" the message lists is probably
// the job itself seen from inside a container: no "this process" clause, and
// the process holds about what PyTorch reserved.
func likelySelf(o *OOM) bool {
	if o == nil || len(o.OtherProcesses) != 1 || o.InUseBytes != nil || o.ReservedTotalBytes == nil {
		return false
	}
	p := o.OtherProcesses[0].Bytes
	r := *o.ReservedTotalBytes
	return p >= r && p-r <= r/10+(1<<30)
}

func (c *Classifier) gpuOOMAdvice(v *Verdict, f *failure, d *[]string, add func(...string)) {
	o := v.OOM
	if sug, ok := engineAdvice(o); ok {
		add(sug...) // a serving engine's start-up sizing: its own settings, no batch
		return
	}
	tooBig := o != nil && o.RequestedBytes != nil && o.TotalBytes != nil && *o.RequestedBytes > *o.TotalBytes
	if tooBig {
		*d = append(*d, "The request alone ("+sizeWords(*o.RequestedBytes)+") is larger than the whole device ("+sizeWords(*o.TotalBytes)+"): no allocator setting and no retry can make it fit.")
		add("Do not retry with the same settings: find the tensor that is far larger than intended (a shape, sequence length or image size mistake), or split the work into smaller pieces.")
	}
	if v.OtherProcesses {
		var ps []string
		for _, p := range o.OtherProcesses {
			ps = append(ps, fmt.Sprintf("process %d holds %s", p.PID, sizeWords(p.Bytes)))
		}
		s := "Other processes hold memory on this device: " + strings.Join(ps, ", ") + ". Inside a container the job itself can appear as \"Process N\""
		if likelySelf(o) {
			s += "; here it probably is this job: it holds about what PyTorch reserved (" + sizeWords(*o.ReservedTotalBytes) + ")"
		}
		*d = append(*d, s+".")
		if likelySelf(o) {
			add("If the job runs in a container, the listed process is probably the job itself; otherwise free the GPU (nvidia-smi shows who holds it) or wait for that process to finish.")
		} else {
			add("Free the GPU or wait: another process holds memory on it (nvidia-smi shows which); gpuguard can wait for the device to be released before relaunching.")
		}
	}
	var fragAdvice string
	fragFirst := false
	if v.Fragmentation {
		ru, req := *o.ReservedUnallocatedBytes, *o.RequestedBytes
		share := "enough to hold the whole request"
		if ru < req {
			share = fmt.Sprintf("%d%% of the request", ru*100/req)
		}
		*d = append(*d, "Fragmentation: "+sizeWords(ru)+" was reserved by PyTorch but unallocated ("+share+"), memory stranded in partly used blocks that this allocation could not use.")
		env := "PYTORCH_CUDA_ALLOC_CONF"
		switch {
		case strings.Contains(v.Text, "PYTORCH_ALLOC_CONF"):
			env = "PYTORCH_ALLOC_CONF"
		case strings.Contains(v.Text, "PYTORCH_HIP_ALLOC_CONF"):
			env = "PYTORCH_HIP_ALLOC_CONF"
		}
		switch {
		case c.exp.on:
			fragAdvice = "expandable_segments was already on, so the allocator setting has done what it can: lower the batch size, or free cached memory between training and validation (torch.cuda.empty_cache())."
		case c.exp.unsupported:
			fragAdvice = "expandable_segments is not supported on this platform (the log says so): set " + env + "=garbage_collection_threshold:0.8,max_split_size_mb:512 to limit fragmentation instead."
		default:
			fragAdvice = "Set " + env + "=expandable_segments:True so that the allocator grows its segments instead of stranding memory in fixed-size blocks."
		}
		// When the stranded memory alone would have held the request, the
		// allocator setting is the first thing to change.
		fragFirst = ru >= req
	}
	if f != nil && (f.extra.allowed != nil || o != nil && o.Format == "allowed_memory_exceeded") {
		add("Raise or remove the per-process memory fraction (torch.cuda.set_per_process_memory_fraction): the device has room the process is not allowed to use.")
	}
	if tooBig {
		return
	}
	if fragFirst {
		add(fragAdvice)
	}
	switch v.Phase {
	case PhaseVal:
		add("Validation ran out of memory: evaluate with a smaller batch (the eval/val batch size) or a smaller validation crop or resolution, and make sure validation runs under torch.no_grad() or torch.inference_mode().")
	case PhaseTrain:
		add("Lower the training batch size and raise gradient accumulation to keep the effective batch size (mixed precision and activation checkpointing also cut memory).")
	default:
		add("Lower the batch size (or the input size) of the step that failed.")
	}
	if fragAdvice != "" && !fragFirst {
		add(fragAdvice)
	}
	if o != nil {
		switch o.Format {
		case "xla_resource_exhausted":
			add("JAX preallocates 75% of the GPU: if another process shares it, set XLA_PYTHON_CLIENT_MEM_FRACTION or XLA_PYTHON_CLIENT_PREALLOCATE=false.")
		case "tf_oom_tensor", "tf_bfc_ran_out", "tf_eigen_allocator_fatal":
			add("If another process shares the GPU, let TensorFlow grow its memory instead of taking it all (TF_FORCE_GPU_ALLOW_GROWTH=true).")
		case "mps":
			add("PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 lifts the MPS limit but can make the whole machine unstable; prefer a smaller batch.")
		case "cublas_alloc_failed", "cudnn_alloc_failed", "nccl_cuda_oom", "cusolver_alloc_failed", "cusparse_alloc_failed", "cufft_alloc_failed":
			add("The GPU was already full when a library needed workspace: check that no other process holds the GPU (nvidia-smi).")
		}
	}
}

func crashAdvice(f *failure) []string {
	switch f.family {
	case "cuda_illegal_memory_access":
		return []string{"Do not retry: rerun once with CUDA_LAUNCH_BLOCKING=1 to find the operation, and check custom CUDA kernels and index tensors."}
	case "cuda_device_side_assert":
		return []string{"Do not retry: check labels and indices (a class id >= the number of classes is the usual cause); run the step on CPU or with CUDA_LAUNCH_BLOCKING=1 to see the exact line."}
	case "cuda_no_kernel_image":
		return []string{"Do not retry: install a PyTorch build that supports this GPU's compute capability (or build extensions with a matching TORCH_CUDA_ARCH_LIST)."}
	case "nccl_timeout", "nccl_error":
		return []string{"Look at the other ranks' output: one of them failed or hung first, and its error is the one to fix; raise the timeout only if a step legitimately takes that long."}
	case "nan_loss":
		return []string{"Do not retry as is: lower the learning rate, enable gradient clipping, check the data for NaNs, or use bf16 instead of fp16."}
	case "import_error", "module_not_found":
		return []string{"Do not retry: fix the environment (install or pin the package version the code expects)."}
	case "file_not_found":
		return []string{"Do not retry: check the path; for a checkpoint, check that the run that should have written it did, and the resume setting."}
	case "segfault":
		return []string{"Look for a crashing native extension or DataLoader worker; rerun with num_workers=0 for a clearer trace."}
	case "bus_error":
		return []string{"Give the job more shared memory (docker --shm-size, a larger /dev/shm) or use fewer DataLoader workers."}
	case "slurm_cancelled":
		return []string{"Resume from the last checkpoint; ask Slurm for more time (--time) if the job needs it."}
	case "cudnn_error":
		return []string{"Check cuDNN and driver versions; if the GPU was nearly full, a smaller batch may also avoid this error."}
	}
	return []string{"Do not retry: fix the error shown on that line (the traceback above it shows where it was raised)."}
}

// crashExplain says in a sentence what a known non-memory failure means.
var crashExplain = map[string]string{
	"cuda_illegal_memory_access": "A GPU kernel read or wrote outside its memory: a bug in a custom kernel or an out-of-range index.",
	"cuda_device_side_assert":    "A check inside a GPU kernel failed, typically a label or index out of range.",
	"cuda_no_kernel_image":       "This PyTorch build has no kernels for the GPU's architecture.",
	"nccl_timeout":               "A collective operation waited longer than its timeout: another rank hung or died first.",
	"bus_error":                  "A bus error in a data-loading process usually means the shared memory (/dev/shm) is too small.",
	"nan_loss":                   "The loss became NaN: training diverged (or the data holds NaNs).",
	"torchrun":                   "torchrun reports that a worker failed; the worker's own error, printed above, is the cause.",
}

// machineWords are the words of failures that point at the machine rather
// than the job (Verdict.Machine), lower case.
var machineWords = []string{"node failure", "nccl timeout", "nccl error", "ecc error", "uncorrectable ecc", "fallen off the bus", "xid", "nvlink", "unable to determine the device handle"}

// machineTrouble reports whether a failure's reason or line names trouble
// of the machine.
func machineTrouble(reason, text string) bool {
	s := strings.ToLower(reason + " " + text)
	for _, w := range machineWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// refusedAllocOption is the allocator option a failure line says PyTorch
// does not know ("RuntimeError: Unrecognized CachingAllocator option:
// expandable_segments"), or "".
func refusedAllocOption(text string) string {
	const phrase = "Unrecognized CachingAllocator option: "
	i := strings.Index(text, phrase)
	if i < 0 {
		return ""
	}
	opt := text[i+len(phrase):]
	if j := strings.IndexAny(opt, " \t,:;\"'"); j >= 0 {
		opt = opt[:j]
	}
	return opt
}
